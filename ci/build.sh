#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configure and build into BUILD_DIR (default: build). Extra arguments go to cmake.
# MLAROPE_CUDA=AUTO builds the CUDA backend when nvcc is found (it compiles without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
# The compiler cache (ccache, ci/setup.sh) when there is one, MLAROPE_CCACHE=0 to go without:
# the test job builds the tree three times from a fresh clone, and most of its objects are the
# same as the last job's. base_dir makes the paths inside the tree relative, so another clone
# of the same sources hits; the prefix map keeps the cwd out of debug info (and so out of the
# hash) in the sanitizer build's -g1 objects. The launcher is stored in the build's cache, so a
# later `ninja -C BUILD_DIR` uses the same settings.
launcher=()
if [ "${MLAROPE_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null; then
  cc="env;CCACHE_BASEDIR=$PWD;ccache"  # a CMake list: the command and its arguments
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=$cc" "-DCMAKE_CUDA_COMPILER_LAUNCHER=$cc")
fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "${launcher[@]}" "$@" >"$build_dir.configure.log" 2>&1 ||
  { cat "$build_dir.configure.log"; exit 1; }
grep "mlarope:" "$build_dir.configure.log" || true
cmake --build "$build_dir" -j "$(nproc)"
