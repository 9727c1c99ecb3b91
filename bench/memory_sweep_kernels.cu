// SPDX-License-Identifier: Apache-2.0
#include <cuda_runtime.h>

#include "memory_sweep_kernels.h"

namespace mlarope::bench {
namespace {

/// Vectors t, t + P, t + 2P, ... (P threads in the grid) of the pattern moved kLoads at a time:
/// every load of a batch issued before its first store. Vector n lies at n / run x stride +
/// n % run (32-bit: the host checks the span fits), computed once for its load and its store.
/// `key` is 0 at run time; the compiler cannot know it, so no store is dropped. The dynamic
/// shared memory only sets the occupancy.
template <int kLoads>
__global__ void __launch_bounds__(128)
    sweep_kernel(const uint4* src, uint4* dst, std::uint32_t vectors, std::uint32_t run,
                 std::uint32_t stride, unsigned key) {
  extern __shared__ unsigned char occupancy_only[];
  (void)occupancy_only;
  const std::uint32_t threads = gridDim.x * blockDim.x;
  for (std::uint32_t k = blockIdx.x * blockDim.x + threadIdx.x; k < vectors;
       k += kLoads * threads) {
    uint4 batch[kLoads];
    std::uint32_t at[kLoads];
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const std::uint32_t n = k + j * threads;
      at[j] = run == stride ? n : n / run * stride + n % run;
      if (n < vectors) batch[j] = src[at[j]];
    }
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      if (k + j * threads < vectors) {
        batch[j].x ^= key;
        dst[at[j]] = batch[j];
      }
    }
  }
}

using Kernel = void (*)(const uint4*, uint4*, std::uint32_t, std::uint32_t, std::uint32_t,
                        unsigned);

// The instance for `loads` (the sweep's 1, 2, 4 or 8; 8 for anything else).
Kernel kernel_for(int loads) {
  switch (loads) {
    case 1: return sweep_kernel<1>;
    case 2: return sweep_kernel<2>;
    case 4: return sweep_kernel<4>;
    default: return sweep_kernel<8>;
  }
}

}  // namespace

cudaError_t prepare_sweep_kernel(int loads, int threads, std::size_t shared_bytes,
                                 SweepKernel* out) {
  const Kernel kernel = kernel_for(loads);
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(shared_bytes));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
  cudaFuncAttributes attributes{};
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attributes, kernel);
  out->registers = attributes.numRegs;
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&out->blocks_per_sm, kernel, threads,
                                                      shared_bytes);
  return e;
}

void launch_sweep_kernel(int loads, unsigned blocks, int threads, std::size_t shared_bytes,
                         cudaStream_t stream, const void* src, void* dst, std::uint32_t vectors,
                         std::uint32_t run, std::uint32_t stride) {
  kernel_for(loads)<<<blocks, threads, shared_bytes, stream>>>(static_cast<const uint4*>(src),
                                                               static_cast<uint4*>(dst), vectors,
                                                               run, stride, 0u);
}

}  // namespace mlarope::bench
