// SPDX-License-Identifier: Apache-2.0
// rope and rope_backward as CUDA kernels: the RowRounds bodies of rope_kernels.h, one
// __global__ per (dtype, variant): 3 x 4 instantiations.
#include "device/cuda_grid.cuh"
#include "device/cuda_launch.h"
#include "kernels/rope_kernels.h"

namespace mlarope::cuda_launch {
namespace {

using namespace mlarope::kernels;
using detail::RopeVariant;

/// Registers of a rope kernel (cuda_grid.cuh): kRegisterCap; 96 for the chunked bodies, whose
/// batches of 8 copied vectors and 4 rotated chunks spill at 80, and for the staged body, whose
/// unrolled step of 16 copies' addresses and a pair chunk's coefficients spill at 80 (its
/// copies hold no registers in flight; its 32 KiB of shared memory hold it to 4 blocks an SM).
template <class Work>
inline constexpr int kRopeRegisters = kRegisterCap;
template <class T, int kPairs>
inline constexpr int kRopeRegisters<RopeChunkedRows<T, kPairs>> = 96;
template <class T>
inline constexpr int kRopeRegisters<RopeStagedRounds<T>> = 96;

/// The phased body of a rope Work: the staged body plans its rounds ahead (PlannedRounds), the
/// others plan each row in its prepare phase (RowRounds).
template <class Work>
struct RopeBody {
  using type = RowRounds<Work>;
};
template <class T>
struct RopeBody<RopeStagedRounds<T>> {
  using type = PlannedRounds<RopeStagedRounds<T>>;
};

template <class Work>
__global__ void MLAROPE_REGISTER_CAP(kRopeRegisters<Work>) rope_kernel(const RopeKernelArgs a) {
  run_phases<typename RopeBody<Work>::type>(a, grid_coord());
}

template <class T>
void launch_typed(const detail::RopeLaunch& l, cudaStream_t stream) {
  const dim3 blocks = blocks_of(l.grid), threads = threads_of(l.grid);
  switch (l.variant) {
    case RopeVariant::chunked_vector:
      rope_kernel<RopeChunkedRows<T, kVectorPairs<T>>><<<blocks, threads, 0, stream>>>(l.args);
      break;
    case RopeVariant::chunked_scalar:
      rope_kernel<RopeChunkedRows<T, 1>><<<blocks, threads, 0, stream>>>(l.args);
      break;
    case RopeVariant::staged_vector:
      rope_kernel<RopeStagedRounds<T>><<<blocks, threads, 0, stream>>>(l.args);
      break;
    case RopeVariant::whole_slice_scalar:
      rope_kernel<RopeWholeSliceRows<T>><<<blocks, threads, 0, stream>>>(l.args);
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
