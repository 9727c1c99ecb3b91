#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Set up, build, and run every test through CTest (Release build, CUDA compiled when nvcc is
# there); the Python package (pip install . and its tests); the tests again in an
# AddressSanitizer + UndefinedBehaviorSanitizer build of the host side, and a fuzz slice there;
# the kernel and launch code's coverage against ci/coverage-baseline.json (ci/coverage.sh, its
# own build); then a short fuzz, the benchmark smoke set and the report. CTest writes a JUnit
# report of each build (out/junit/*.xml), the fuzz runs and the report write theirs too.
# Benchmarks gate only against a base measured in the same job: MLAROPE_BENCH_BASE=REF runs
# ci/bench-compare.sh REF (the working tree against REF, interleaved, on this machine) and
# fails on a key SLOWER twice; without it the benchmarks are reported, never failed on: a
# stored baseline cannot gate another machine, and this command must pass a clean tree anywhere.
# MLAROPE_SKIP_SANITIZE=1 skips the sanitizer build, MLAROPE_SKIP_COVERAGE=1 the coverage,
# MLAROPE_SKIP_EXTRA=1 the fuzz/bench/report, MLAROPE_SKIP_PYTHON=1 the Python package,
# MLAROPE_SKIP_LINT=1 the format and lint checks (ci/lint.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS=0
trap 'echo "test: finished after ${SECONDS} s"' EXIT
bash ci/setup.sh
bash ci/build.sh -DMLAROPE_WERROR=ON  # warnings fail the job (MLAROPE_WERROR)
junit=$PWD/out/junit
rm -rf "$junit" && mkdir -p "$junit"
# CTest over BUILD_DIR, its JUnit report kept as out/junit/NAME.xml (made valid for the Jenkins
# schema by ci/junit_for_ci.py) whether the tests pass or not.
run_ctest() {  # run_ctest BUILD_DIR NAME
  local status=0
  ctest --test-dir "$1" --output-on-failure -j "$(nproc)" --output-junit "$junit/$2.ctest.xml" || status=$?
  python3 ci/junit_for_ci.py "$junit/$2.ctest.xml" "$junit/$2.xml" && rm -f "$junit/$2.ctest.xml"
  return "$status"
}
run_ctest build ctest-release
if [ "${MLAROPE_SKIP_LINT:-0}" != 1 ]; then
  # Format (clang-format), Python lint (ruff) and whitespace over the whole tree, which is kept
  # clean; clang-tidy, minutes a file set, on the files changed since the base (ci/lint.sh).
  echo "test: at ${SECONDS} s, lint (ci/lint.sh)"
  MLAROPE_LINT_SKIP=clang-tidy bash ci/lint.sh --all
  MLAROPE_LINT_SKIP=clang-format,ruff,whitespace bash ci/lint.sh
fi
if [ "${MLAROPE_SKIP_PYTHON:-0}" != 1 ]; then
  echo "test: the Python package (pip install ., pytest), at ${SECONDS} s"
  bash ci/python-test.sh
fi
if [ "${MLAROPE_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "test: sanitizer build (ASan + UBSan, no CUDA, no benchmarks), at ${SECONDS} s"
  BUILD_DIR=build-asan BUILD_TYPE=RelWithDebInfo bash ci/build.sh -DMLAROPE_SANITIZE=ON \
    -DMLAROPE_CUDA=OFF -DMLAROPE_BENCH=OFF
  # The property tests at a quarter of their cases here: the Release run above has them all,
  # and under the sanitizers they take most of this step.
  MLAROPE_PROPERTY_SCALE=0.25 run_ctest build-asan ctest-asan
  # The fuzz slice in both host modes (half the budget each): the checks' buffers have their
  # guards and gaps poisoned (harness/checks/asan_guards.h), so a read or write past a tensor
  # in the GPU model's device paths or in the fast mode's host-only branches stops here.
  half=$(( ${ASAN_FUZZ_SECONDS:-30} / 2 ))
  for mode in host host-fast; do
    echo "test: at ${SECONDS} s, fuzz slice under ASan + UBSan (${half} s, --backend $mode)"
    rm -rf "out/asan-fuzz-$mode"
    build-asan/mlarope fuzz --seconds "$half" --backend "$mode" --jobs "$(nproc)" \
      --out "out/asan-fuzz-$mode" | tail -n 4
  done
fi
if [ "${MLAROPE_SKIP_COVERAGE:-0}" != 1 ]; then
  echo "test: at ${SECONDS} s, coverage of the kernel and launch code (ci/coverage.sh)"
  CTEST_JUNIT="$junit/ctest-coverage.xml" bash ci/coverage.sh build-cov out/coverage
fi
if [ "${MLAROPE_SKIP_EXTRA:-0}" != 1 ]; then
  echo "test: at ${SECONDS} s, the extras"
  # 30 s of fuzz there: the sanitizer build's fuzz and the coverage slices come first, and the
  # whole job keeps near its 20-minute budget.
  FUZZ_SECONDS=${FUZZ_SECONDS:-30} bash ci/ci-extra.sh build out/ci
fi
if [ -n "${MLAROPE_BENCH_BASE:-}" ]; then
  echo "test: at ${SECONDS} s, the benchmark gate against $MLAROPE_BENCH_BASE (ci/bench-compare.sh)"
  bash ci/bench-compare.sh "$MLAROPE_BENCH_BASE" out/bench-compare
fi
echo "test: JUnit reports:" $(cd out && ls junit/*.xml asan-fuzz-host/junit.xml asan-fuzz-host-fast/junit.xml ci/fuzz/junit.xml ci/report/junit.xml 2>/dev/null)
if [ "${MLAROPE_SKIP_COVERAGE:-0}" != 1 ]; then  # the coverage summary again, at the end of the log
  echo "test: coverage of the kernel and launch code (lines, branches; out/coverage/coverage.txt):"
  sed -n '/^  total/p; /^exclusions/,$p' out/coverage/coverage.txt
fi
