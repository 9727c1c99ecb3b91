#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# After the tests: a short fuzz of every op, the benchmark smoke set, and the report (summary,
# page, JUnit, Bencher's BMF and github-action-benchmark's JSON); prints the Markdown summary.
# The benchmarks are reported, not gated: the gate is ci/bench-compare.sh, a base measured
# beside its change. MLAROPE_BENCH_HISTORY=DIR records the run in a history folder (one JSON
# per commit, kept by the CI system between runs) and draws the trend.
# Usage: ci/ci-extra.sh [BUILD_DIR] [OUT_DIR]. FUZZ_SECONDS (default 60) sets the fuzz budget.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-out/ci}
rm -rf "$out" && mkdir -p "$out"
echo "ci: fuzz, ${FUZZ_SECONDS:-60} s on the host backend"
"$build/mlarope" fuzz --seconds "${FUZZ_SECONDS:-60}" --backend host --jobs "$(nproc)" --out "$out/fuzz" | tail -n 12
echo "ci: benchmark smoke set"
"$build/mlarope_bench" --benchmark_min_time=0.1 --benchmark_repetitions=3 \
  --benchmark_out="$out/bench.json" --benchmark_out_format=json >"$out/bench.txt"
echo "ci: the checking mode's cost (mlarope_bench --model-cost: the GPU model against the fast mode)"
"$build/mlarope_bench" --model-cost >"$out/model-cost.md" ||
  echo "ci: some calls take the GPU model more than 50x the fast mode (docs/kernels.md, the checking mode's cost)"
cat "$out/model-cost.md"
echo "ci: report"
"$build/mlarope" report "$out/fuzz/fuzz.json" "$out/bench.json" --out "$out/report" \
  ${MLAROPE_BENCH_HISTORY:+--history "$MLAROPE_BENCH_HISTORY"}
