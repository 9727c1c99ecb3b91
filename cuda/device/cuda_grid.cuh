// SPDX-License-Identifier: Apache-2.0
// The GridCoord of the calling CUDA thread, and the common launch bound of the kernels.
#pragma once

#include "kernels/grid.h"

namespace mlarope::cuda_launch {

/// Threads per block the kernels are compiled for (LaunchProfile::max_threads of CUDA).
inline constexpr int kMaxThreadsPerBlock = 128;

/// Register cap of the rope and kv_split_backward kernels (every kernel is a RowRounds body,
/// whose phase loop keeps more values live). ptxas's own choice for __launch_bounds__(128)
/// spilled in the f16 instances (the branchy f32 -> f16 rounding), and so did a cap of 72;
/// at 80 (6 blocks of 128 threads per SM) none of them spills. A higher cap does not help: at
/// 96 ptxas keeps more in flight and the scalar instances spill 8 bytes. Instances that need
/// fewer registers use fewer. kv_split_kernel keeps ptxas's own choice: 64 registers, and its
/// f32 vector instance spills 8 bytes (the cap of 80 made the 16-bit instances spill more).
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
