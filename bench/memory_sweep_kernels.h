// SPDX-License-Identifier: Apache-2.0
// The kernel of the memory sweep (bench/memory_sweep.cpp), apart so that nvcc compiles only it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mlarope::bench {

/// What the driver says of the sweep kernel with `loads` loads in flight per thread (1, 2, 4 or
/// 8), set up for `shared_bytes` of dynamic shared memory and the largest carveout.
struct SweepKernel {
  int registers = 0;
  int blocks_per_sm = 0;  ///< of `threads` threads
};
/// Sets the kernel's attributes and reads its registers and occupancy. Returns the error of the
/// first call that failed, cudaSuccess otherwise.
cudaError_t prepare_sweep_kernel(int loads, int threads, std::size_t shared_bytes,
                                 SweepKernel* out);

/// One launch: vectors t, t + P, ... (P = blocks x threads) of runs of `run` 16-byte vectors
/// every `stride` vectors, read from `src` and written to `dst` (the same buffer in place),
/// `loads` at a time, every load of a batch before its first store. The span (vectors / run x
/// stride) and vectors + loads x P must fit in 32 bits.
void launch_sweep_kernel(int loads, unsigned blocks, int threads, std::size_t shared_bytes,
                         cudaStream_t stream, const void* src, void* dst, std::uint32_t vectors,
                         std::uint32_t run, std::uint32_t stride);

}  // namespace mlarope::bench
