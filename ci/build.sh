#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configure and build into BUILD_DIR (default: build). Extra arguments go to cmake.
# MLAROPE_CUDA=AUTO builds the CUDA backend when nvcc is found (it compiles without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@" >"$build_dir.configure.log" 2>&1 ||
  { cat "$build_dir.configure.log"; exit 1; }
grep "mlarope:" "$build_dir.configure.log" || true
cmake --build "$build_dir" -j "$(nproc)"
