// SPDX-License-Identifier: Apache-2.0
// kv_split and kv_split_backward as CUDA kernels: the RowRounds bodies of kv_split_kernels.h,
// one __global__ per (dtype, variant): 2 x 3 x 2 instantiations.
#include "device/cuda_grid.cuh"
#include "device/cuda_launch.h"
#include "kernels/kv_split_kernels.h"

namespace mlarope::cuda_launch {
namespace {

using namespace mlarope::kernels;
using detail::KvVariant;

/// 128 registers (cuda_grid.cuh): the batches of copies (kKvCopyBatch) spill at 104.
template <class T, int kPairs>
__global__ void MLAROPE_REGISTER_CAP(128) kv_split_kernel(const KvSplitKernelArgs a) {
  run_phases<RowRounds<KvSplitRows<T, kPairs>>>(a, grid_coord());
}

/// 96 registers (cuda_grid.cuh): at 80 the batches of copies (kKvCopyBatch) spill.
template <class T, int kPairs>
__global__ void MLAROPE_REGISTER_CAP(96)
    kv_split_backward_kernel(const KvSplitBackwardKernelArgs a) {
  run_phases<RowRounds<KvSplitBackwardRows<T, kPairs>>>(a, grid_coord());
}

template <class T>
void launch_typed(const detail::KvSplitLaunch& l, cudaStream_t stream) {
  const dim3 blocks = blocks_of(l.grid), threads = threads_of(l.grid);
  if (l.variant == KvVariant::vector)
    kv_split_kernel<T, kVectorPairs<T>><<<blocks, threads, 0, stream>>>(l.args);
  else kv_split_kernel<T, 1><<<blocks, threads, 0, stream>>>(l.args);
}

template <class T>
void launch_typed(const detail::KvSplitBackwardLaunch& l, cudaStream_t stream) {
  const dim3 blocks = blocks_of(l.grid), threads = threads_of(l.grid);
  if (l.variant == KvVariant::vector)
    kv_split_backward_kernel<T, kVectorPairs<T>><<<blocks, threads, 0, stream>>>(l.args);
  else kv_split_backward_kernel<T, 1><<<blocks, threads, 0, stream>>>(l.args);
}

template <class Launch>
void launch_by_dtype(const Launch& l, cudaStream_t stream) {
  switch (l.dtype) {
    case DType::f16: launch_typed<Half>(l, stream); break;
    case DType::bf16: launch_typed<BFloat16>(l, stream); break;
    default: launch_typed<float>(l, stream); break;
  }
}

}  // namespace

void launch(const detail::KvSplitLaunch& l, cudaStream_t stream) { launch_by_dtype(l, stream); }

void launch(const detail::KvSplitBackwardLaunch& l, cudaStream_t stream) {
  launch_by_dtype(l, stream);
}

}  // namespace mlarope::cuda_launch
