// rope and rope_backward as CUDA kernels: the bodies of rope_kernels.h, one __global__ per
// (dtype, variant): 3 x 4 instantiations.
#include "device/cuda_grid.cuh"
#include "device/cuda_launch.h"
#include "kernels/rope_kernels.h"

namespace mlarope::cuda_launch {
namespace {

using namespace mlarope::kernels;
using detail::RopeVariant;

template <class T, int kPairs>
__global__ void MLAROPE_CHUNKED_KERNEL_BOUNDS rope_chunked_kernel(const RopeKernelArgs a) {
  rope_chunked_body<T, kPairs>(a, grid_coord());
}

// The chunked kernels' register cap: at ptxas's 64 the bf16 instance spilled 24 bytes.
template <class T>
__global__ void MLAROPE_CHUNKED_KERNEL_BOUNDS rope_staged_kernel(const RopeKernelArgs a) {
  run_phases<RopeStagedBody<T>>(a, grid_coord());
}

template <class T>
__global__ void __launch_bounds__(kMaxThreadsPerBlock)
    rope_whole_slice_scalar_kernel(const RopeKernelArgs a) {
  rope_whole_slice_scalar_body<T>(a, grid_coord());
}

template <class T>
void launch_typed(const detail::RopeLaunch& l, cudaStream_t stream) {
  const dim3 blocks = blocks_of(l.grid), threads = threads_of(l.grid);
  switch (l.variant) {
    case RopeVariant::chunked_vector:
      rope_chunked_kernel<T, kVectorPairs<T>><<<blocks, threads, 0, stream>>>(l.args);
      break;
    case RopeVariant::chunked_scalar:
      rope_chunked_kernel<T, 1><<<blocks, threads, 0, stream>>>(l.args);
      break;
    case RopeVariant::staged_vector:
      rope_staged_kernel<T><<<blocks, threads, 0, stream>>>(l.args);
      break;
    case RopeVariant::whole_slice_scalar:
      rope_whole_slice_scalar_kernel<T><<<blocks, threads, 0, stream>>>(l.args);
      break;
  }
}

}  // namespace

void launch(const detail::RopeLaunch& l, cudaStream_t stream) {
  switch (l.dtype) {
    case DType::f16: launch_typed<Half>(l, stream); break;
    case DType::bf16: launch_typed<BFloat16>(l, stream); break;
    default: launch_typed<float>(l, stream); break;
  }
}

}  // namespace mlarope::cuda_launch
