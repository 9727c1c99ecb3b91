#!/usr/bin/env bash
# Set up, build, and run every test through CTest (Release build), then the host-side tests
# again in an AddressSanitizer + UndefinedBehaviorSanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
if [ "${MLAROPE_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "test: sanitizer build (ASan + UBSan, no CUDA, no benchmarks)"
  BUILD_DIR=build-asan BUILD_TYPE=Debug bash ci/build.sh -DMLAROPE_SANITIZE=ON -DMLAROPE_CUDA=OFF -DMLAROPE_BENCH=OFF
  ctest --test-dir build-asan --output-on-failure -j "$(nproc)"
fi
