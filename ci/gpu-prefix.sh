# SPDX-License-Identifier: Apache-2.0
# Sourced by ci/gpu-deps.sh and ci/gpu-check.sh: where the carried dependency prefix lives, and
# the CMake arguments that make find_package look there and nowhere else.
#   gpu_deps      .gpu-deps (git-ignored; made by ci/gpu-deps.sh, carried to the GPU machine)
#   gpu_prefix    its unpacked Debian packages (usr/include, usr/lib/..., usr/share/cmake)
#   prefix_only   CMake arguments: search the prefix only (no system, PATH or registry paths)
gpu_deps=$PWD/.gpu-deps
gpu_prefix=$gpu_deps/prefix/usr
gpu_libdir=$gpu_prefix/lib/x86_64-linux-gnu

# The path of the first of NAMES found on PATH, in /usr/local/cuda/bin or in $CUDA_HOME/bin.
find_tool() {
  local name dir
  for name in "$@"; do
    command -v "$name" 2>/dev/null && return 0
    for dir in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
      [ -n "$dir" ] && [ -x "$dir/bin/$name" ] && { echo "$dir/bin/$name"; return 0; }
    done
  done
  return 1
}

# With the system and PATH-derived prefixes off, CMake cannot find the compilers or ninja by
# itself: they are named here by absolute path.
prefix_only=(
  -DCMAKE_PREFIX_PATH="$gpu_prefix"
  -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF
  -DCMAKE_FIND_USE_SYSTEM_ENVIRONMENT_PATH=OFF
  -DCMAKE_FIND_USE_CMAKE_ENVIRONMENT_PATH=OFF
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
  -DCMAKE_CXX_COMPILER="$(find_tool c++ g++)"
  -DCMAKE_MAKE_PROGRAM="$(find_tool ninja ninja-build)"
)
export LD_LIBRARY_PATH=$gpu_libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
