// The phased test body of testing/block_sum.h as a CUDA kernel: block barriers and shared
// memory written once compile to __syncthreads() and __shared__ (built, not run, without a GPU).
#include "kernels/portability.h"
#include "testing/block_sum.h"

namespace mlarope::test_kernels {

__device__ inline kernels::GridCoord block_sum_coord() {
  return {static_cast<std::int64_t>(blockIdx.x), static_cast<std::int64_t>(gridDim.x),
          static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
}

__global__ void block_sum_kernel(const BlockSumArgs args) {
  kernels::run_phases<BlockSum<64>>(args, block_sum_coord());
}

}  // namespace mlarope::test_kernels
