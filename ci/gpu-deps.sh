#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run HERE (Debian bookworm, with its package mirror), before ci/gpu-check.sh goes to a GPU
# machine that has the CUDA toolkit but no network and none of our dependencies. Makes the
# git-ignored folder .gpu-deps, to be carried there (the device tool's carry: [".gpu-deps"]):
#   .gpu-deps/prefix/usr  the Debian packages below, unpacked with dpkg -x, docs dropped
#   .gpu-deps/python      Megatron's RoPE sources, from the pinned megatron-core wheel
#   .gpu-deps/MANIFEST    package versions, the wheel, the size
# then proves that CMake finds every package from the prefix alone, and prints the size.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/gpu-prefix.sh
packages=(libeigen3-dev librapidcheck-dev libgtest-dev libgmock-dev libbenchmark-dev
          libbenchmark1debian libcli11-dev nlohmann-json3-dev pybind11-dev libdlpack-dev)

# Download the packages (no install, no root needed) and unpack them into the prefix.
unpack_packages() {
  local debs
  debs=$(mktemp -d)
  (cd "$debs" && apt-get download "${packages[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
  rm -rf "$gpu_deps/prefix"
  mkdir -p "$gpu_deps/prefix"
  for deb in "$debs"/*.deb; do dpkg -x "$deb" "$gpu_deps/prefix"; done
  for deb in "$debs"/*.deb; do dpkg-deb -f "$deb" Package Version | paste -sd' '; done >"$gpu_deps/MANIFEST"
  rm -rf "$debs"
}

# What the build does not read: documentation, pkg-config files, the dangling gtest source link.
prune_prefix() {
  rm -rf "$gpu_prefix/share/doc" "$gpu_prefix/share/pkgconfig" "$gpu_libdir/pkgconfig" "$gpu_prefix/src"
}

# Megatron's RoPE sources (adapters/megatron), from the pinned, hash-checked wheel: only the
# files the adapters load, unpacked into .gpu-deps/python (a namespace package; no __init__ runs).
copy_megatron() {
  local wheels
  wheels=$(mktemp -d)
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --require-hashes -r adapters/megatron/requirements.txt -d "$wheels"
  rm -rf "$gpu_deps/python"
  mkdir -p "$gpu_deps/python"
  (cd "$gpu_deps/python" && python3 -m zipfile -e "$wheels"/megatron_core-*.whl . &&
     find megatron -type f ! -path 'megatron/core/models/common/embeddings/*.py' \
       ! -path 'megatron/core/fusions/fused_mla_yarn_rope_apply.py' -delete &&
     find megatron -type d -empty -delete)
  echo "megatron $(ls "$wheels") ($(find "$gpu_deps/python" -name '*.py' | wc -l) files)" >>"$gpu_deps/MANIFEST"
  rm -rf "$wheels"
}

# A throwaway CMake project that finds every package the build needs with the prefix-only
# search of ci/gpu-check.sh, and fails unless each config file lies inside the prefix.
verify_prefix() {
  local probe
  probe=$(mktemp -d)
  cat >"$probe/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.24)
project(gpu_deps_probe LANGUAGES CXX)
find_package(Threads REQUIRED)
foreach(pkg Eigen3 nlohmann_json CLI11 GTest rapidcheck benchmark)
  find_package(${pkg} REQUIRED CONFIG)
  message(STATUS "probe: ${pkg} ${${pkg}_VERSION} from ${${pkg}_DIR}")
endforeach()
foreach(target Eigen3::Eigen nlohmann_json::nlohmann_json CLI11::CLI11 GTest::gtest GTest::gtest_main
               GTest::gmock rapidcheck rapidcheck_gtest benchmark::benchmark)
  if(NOT TARGET ${target})
    message(FATAL_ERROR "probe: no target ${target}")
  endif()
endforeach()
EOF
  cmake -S "$probe" -B "$probe/build" -G Ninja "${prefix_only[@]}" >"$probe/log" 2>&1 ||
    { cat "$probe/log"; rm -rf "$probe"; exit 1; }
  grep "probe:" "$probe/log" | sed 's/^-- //'
  if grep "probe:" "$probe/log" | grep -v " from $gpu_prefix/"; then
    echo "gpu-deps: a package was found outside $gpu_prefix" >&2; rm -rf "$probe"; exit 1
  fi
  [ -e "$gpu_libdir/libbenchmark.so.1debian" ] || { echo "gpu-deps: libbenchmark's runtime .so is missing" >&2; exit 1; }
  rm -rf "$probe"
}

unpack_packages
prune_prefix
copy_megatron
verify_prefix
size=$(du -sh "$gpu_deps" | cut -f1)
echo "size $size" >>"$gpu_deps/MANIFEST"
echo "gpu-deps: $gpu_deps is $size (carry limit 64 MiB): prefix $(du -sh "$gpu_deps/prefix" | cut -f1)"
