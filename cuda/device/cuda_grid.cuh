// SPDX-License-Identifier: Apache-2.0
// The GridCoord of the calling CUDA thread, and the common launch bound of the kernels.
#pragma once

#include "kernels/grid.h"

namespace mlarope::cuda_launch {

/// Threads per block the kernels are compiled for (LaunchProfile::max_threads of CUDA).
inline constexpr int kMaxThreadsPerBlock = 128;

/// Registers of a kernel, fixed per kernel (MLAROPE_REGISTER_CAP) rather than left to
/// ptxas, which under __launch_bounds__(128) alone spilled in several instances. A budget is
/// an occupancy tier (65,536 registers an SM: up to 80 leave 6 blocks of 128 threads, 96
/// leave 5, 128 leave 4) traded against the loads a thread keeps in flight: the bodies with
/// batches of loads (kCopyBatch) need more registers, and the timing model weighs the two
/// (docs/kernels.md). Each kernel takes the top of the lowest tier at which none of its
/// instances spills; build/ptxas.txt has what each one uses.
/// kRegisterCap: the bodies without batches (whole-slice rope).
inline constexpr int kRegisterCap = 80;
#if defined(CUDART_VERSION) && CUDART_VERSION >= 12040
#define MLAROPE_REGISTER_CAP(registers) __maxnreg__(registers)
#else
#define MLAROPE_REGISTER_CAP(registers) __launch_bounds__(128)
#endif

/// Where the calling thread is in a one-dimensional grid.
__device__ __forceinline__ kernels::GridCoord grid_coord() {
  return {static_cast<std::int64_t>(blockIdx.x), static_cast<std::int64_t>(gridDim.x),
          static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
}

/// The launch configuration of a GridShape.
inline dim3 blocks_of(const kernels::GridShape& g) { return dim3(static_cast<unsigned>(g.blocks)); }
inline dim3 threads_of(const kernels::GridShape& g) {
  return dim3(static_cast<unsigned>(g.threads));
}

}  // namespace mlarope::cuda_launch
