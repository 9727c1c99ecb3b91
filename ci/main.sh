#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job, the whole verification run: set up, build, run the bundled Megatron cases on
# the reference and the optimized backends, fuzz every op on every available backend for about
# a minute, run the benchmark smoke set, and write the report. Ends with the Markdown summary
# and the path of the page. FUZZ_SECONDS (default 60) is the fuzz budget per backend.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh
out=out/main
rm -rf "$out" && mkdir -p "$out"
backends=(host)
if ./build/mlarope run examples/mla_rope_sbhd_f16 --backend cuda >/dev/null 2>&1; then
  backends+=(cuda)
fi
echo "== bundled cases (Megatron-LM's float64 answers) on reference ${backends[*]}"
for case_dir in examples/*/; do
  [ -f "$case_dir/case.json" ] || continue  # examples/plugin holds kernel plugins, not a case
  for backend in reference "${backends[@]}"; do
    ./build/mlarope run "$case_dir" --backend "$backend" --out "$out/cases/$backend/$(basename "$case_dir")" | grep -E "vs|tolerance|error"
  done
done
reports=()
for backend in "${backends[@]}"; do
  echo "== fuzz every op on $backend for ${FUZZ_SECONDS:-60} s"
  ./build/mlarope fuzz --seconds "${FUZZ_SECONDS:-60}" --backend "$backend" --jobs "$(nproc)" \
    --out "$out/fuzz-$backend" | awk -v json="$out/fuzz-$backend/fuzz.json" '
      /^mlarope fuzz:/ {p = 1}
      /GPU model/ {skip = 1; print "  GPU model per kernel: in the report and " json " (gpu_model)"; next}
      skip && /^    / {next} {skip = 0} p'  # the summary; the model's per-kernel lines cut
  reports+=("$out/fuzz-$backend/fuzz.json")
done
echo "== benchmark smoke set"
./build/mlarope_bench --benchmark_min_time=0.1 --benchmark_out="$out/bench.json" \
  --benchmark_out_format=json >"$out/bench.txt"
reports+=("$out/bench.json")
if [ -x build/cuda_bench ] && [[ " ${backends[*]} " == *" cuda "* ]]; then
  ./build/cuda_bench --benchmark_out="$out/cuda_bench.json" --benchmark_out_format=json >"$out/cuda_bench.txt"
  reports+=("$out/cuda_bench.json")
fi
[ -s build/ptxas.txt ] && reports+=(build/ptxas.txt)  # registers and spills of the CUDA kernels
echo "== report"
./build/mlarope report "${reports[@]}" --out "$out/report"
