#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Line and branch coverage of the kernel and launch code (cuda/kernels, cuda/launch): builds
# BUILD_DIR with -DMLAROPE_COVERAGE=ON (the targets of cuda/ at -O0 with gcov counts, no CUDA,
# no benchmarks), runs its CTest (property tests at a quarter of their cases) and two fixed fuzz
# slices (the host backend's GPU model and its fast mode, COVERAGE_FUZZ_CASES cases each), then
# ci/coverage.py: the per-file table (branches merged over template instantiations), every
# uncovered line and branch, every exclusion with its reason, OUT_DIR/coverage.{json,txt}; it
# fails when a file is below ci/coverage-baseline.json. Device-only code (#if __CUDA_ARCH__)
# is not compiled on the host and is not counted.
#
#   bash ci/coverage.sh [BUILD_DIR [OUT_DIR]]            build, run, report and compare
#   bash ci/coverage.sh BUILD_DIR OUT_DIR --record       ... and write the baseline instead
#   COVERAGE_REPORT_ONLY=1 bash ci/coverage.sh ...       only the report of the counts there
#   CTEST_JUNIT=FILE bash ci/coverage.sh ...             CTest's JUnit report written there
#                                                        (through ci/junit_for_ci.py)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cov}
out=${2:-out/coverage}
record=${3:-}
SECONDS=0
if [ "${COVERAGE_REPORT_ONLY:-0}" != 1 ]; then
  BUILD_DIR="$build" bash ci/build.sh -DMLAROPE_COVERAGE=ON -DMLAROPE_CUDA=OFF -DMLAROPE_BENCH=OFF
  find "$build" -name '*.gcda' -delete  # counts of this run only
  echo "coverage: at ${SECONDS} s, CTest in the coverage build"
  status=0
  # Not the job-array shard test: it exercises the shard variables, not the kernel and launch
  # code, and the release and sanitizer runs have it (here it took a minute at -O0).
  MLAROPE_PROPERTY_SCALE=0.25 ctest --test-dir "$build" --output-on-failure -j "$(nproc)" \
    -E '^fuzz_shards_through_job_array_env$' ${CTEST_JUNIT:+--output-junit "$CTEST_JUNIT.ctest.xml"} || status=$?
  if [ -n "${CTEST_JUNIT:-}" ]; then
    python3 ci/junit_for_ci.py "$CTEST_JUNIT.ctest.xml" "$CTEST_JUNIT" && rm -f "$CTEST_JUNIT.ctest.xml"
  fi
  [ "$status" = 0 ] || exit "$status"
  cases=${COVERAGE_FUZZ_CASES:-500}
  for backend in host host-fast; do
    echo "coverage: at ${SECONDS} s, fuzz slice: $cases cases on $backend, seed 4242"
    rm -rf "$out/fuzz-$backend"
    "$build/mlarope" fuzz --cases "$cases" --backend "$backend" --jobs "$(nproc)" --seed 4242 \
      --out "$out/fuzz-$backend" | tail -n 2
  done
  echo "coverage: at ${SECONDS} s, the report"
fi
python3 ci/coverage.py "$build/cuda" "$out" ${record:+"$record"}
