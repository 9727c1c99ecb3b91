// SPDX-License-Identifier: Apache-2.0
// yarn_tables as a CUDA kernel.
#include "device/cuda_grid.cuh"
#include "device/cuda_launch.h"
#include "kernels/yarn_kernels.h"

namespace mlarope::cuda_launch {
namespace {

using namespace mlarope::kernels;

__global__ void __launch_bounds__(kMaxThreadsPerBlock) yarn_tables_kernel(const YarnKernelArgs a) {
  yarn_tables_body(a, grid_coord());
}

}  // namespace

void launch(const detail::YarnLaunch& l, cudaStream_t stream) {
  yarn_tables_kernel<<<blocks_of(l.grid), threads_of(l.grid), 0, stream>>>(l.args);
}

}  // namespace mlarope::cuda_launch
