// The GridCoord of the calling CUDA thread, and the common launch bound of the kernels.
#pragma once

#include "kernels/grid.h"

namespace mlarope::cuda_launch {

/// Threads per block the kernels are compiled for (LaunchProfile::max_threads of CUDA).
inline constexpr int kMaxThreadsPerBlock = 128;

/// Register cap of the chunked rope kernels: ptxas's own choice for __launch_bounds__(128)
/// (64 registers) spilled 10 bytes in the f16 fast path; 72 keeps every variant spill free
/// at 7 blocks of 128 threads per SM.
#if defined(CUDART_VERSION) && CUDART_VERSION >= 12040
#define MLAROPE_CHUNKED_KERNEL_BOUNDS __maxnreg__(72)
#else
#define MLAROPE_CHUNKED_KERNEL_BOUNDS __launch_bounds__(128)
#endif

/// Where the calling thread is in a one-dimensional grid.
__device__ __forceinline__ kernels::GridCoord grid_coord() {
  return {static_cast<std::int64_t>(blockIdx.x), static_cast<std::int64_t>(gridDim.x),
          static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
}

/// The launch configuration of a GridShape.
inline dim3 blocks_of(const kernels::GridShape& g) { return dim3(static_cast<unsigned>(g.blocks)); }
inline dim3 threads_of(const kernels::GridShape& g) { return dim3(static_cast<unsigned>(g.threads)); }

}  // namespace mlarope::cuda_launch
