#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and the CUDA toolkit but no network:
# build with CUDA, run the whole test suite (the CUDA instances run instead of skipping,
# real CUDA graph capture and replay included), fuzz the CUDA backend, run compute-sanitizer
# memcheck and racecheck over cases of every kernel, run the benchmarks, and write everything
# to one folder (OUT_DIR, default $OUT or gpu-check-out) ending with a short table.
# Dependencies: found on the machine, or unpacked from .gpu-deps/debs (made by ci/gpu-deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-${OUT:-gpu-check-out}}
mkdir -p "$out"
fuzz_seconds=${FUZZ_SECONDS:-60}
declare -a rows=()
row() { rows+=("$(printf '%-22s %-6s %6ss  %s' "$1" "$2" "$3" "$4")"); }

# Run a step: NAME LOG COMMAND...; records status and time.
step() {
  local name=$1 log=$2; shift 2
  local start=$SECONDS
  "$@" >"$out/$log" 2>&1
  local rc=$?
  local status=ok; [ $rc -eq 0 ] || status="rc=$rc"
  row "$name" "$status" "$((SECONDS - start))" "$(tail -n 1 "$out/$log" | cut -c1-70)"
  return $rc
}

if [ -d .gpu-deps/debs ]; then
  prefix=/tmp/mlarope-deps
  mkdir -p "$prefix"
  for deb in .gpu-deps/debs/*.deb; do dpkg -x "$deb" "$prefix"; done
  export CMAKE_PREFIX_PATH="$prefix/usr:$prefix/usr/share/eigen3/cmake${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CPATH="$prefix/usr/include:$prefix/usr/include/eigen3${CPATH:+:$CPATH}"
fi

nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
build=build-gpu
step configure configure.log cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMLAROPE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 || { printf '%s\n' "${rows[@]}"; exit 1; }
step build build.log cmake --build $build -j "$(nproc)" || { printf '%s\n' "${rows[@]}"; exit 1; }
grep -E "ptxas info|spill|lmem" "$out/build.log" >"$out/ptxas.txt" || true

cases=${MLAROPE_CASES_DIR:-../shared/cases/megatron}
MLAROPE_CASES_DIR=$cases step ctest ctest.log ctest --test-dir $build --output-on-failure -j 8
step fuzz-cuda fuzz.log $build/mlarope fuzz --seconds "$fuzz_seconds" --backend cuda --out "$out/fuzz"

if command -v compute-sanitizer >/dev/null; then
  : >"$out/sanitizer.log"
  sanitize() {  # every case of every op, under memcheck and racecheck
    local status=0
    for tool in memcheck racecheck; do
      for c in examples/*/ "$cases"/case_00{0,2,4,8} "$cases"/case_01{3,6,9}; do
        [ -f "$c/case.json" ] || continue
        compute-sanitizer --tool $tool --error-exitcode 9 \
          $build/mlarope run "$c" --backend cuda >>"$out/sanitizer.log" 2>&1 || status=1
      done
    done
    grep -c "ERROR SUMMARY: 0 errors" "$out/sanitizer.log"
    return $status
  }
  step compute-sanitizer sanitizer-steps.log sanitize
else
  row compute-sanitizer skip 0 "compute-sanitizer not on the PATH"
fi

step bench bench.log $build/mlarope_bench --benchmark_out="$out/bench.json" --benchmark_out_format=json
if [ -x $build/cuda_bench ]; then
  step cuda-bench cuda_bench.log $build/cuda_bench --benchmark_out="$out/cuda_bench.json" --benchmark_out_format=json
fi
reports=("$out/bench.json")
[ -f "$out/cuda_bench.json" ] && reports+=("$out/cuda_bench.json")
[ -f "$out/fuzz/fuzz.json" ] && reports+=("$out/fuzz/fuzz.json")
step report report.log $build/mlarope report "${reports[@]}" --out "$out/report"

echo
echo "GPU check: everything is under $out"
printf '%-22s %-6s %7s  %s\n' step status time "last line of its log"
printf '%s\n' "${rows[@]}" | tee "$out/summary.txt"
! grep -q "rc=" "$out/summary.txt"
