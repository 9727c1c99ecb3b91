// SPDX-License-Identifier: Apache-2.0
// The CUDA launch of each launch descriptor: the kernel bodies as __global__ kernels
// (cuda_rope.cu, cuda_kv_split.cu, cuda_yarn.cu), enqueued on a CUDA stream.
#pragma once

#include <cuda_runtime_api.h>

#include "launch/launches.h"

namespace mlarope::cuda_launch {

/// Enqueue one launch on `stream` (errors are left for cudaGetLastError).
void launch(const detail::RopeLaunch& l, cudaStream_t stream);
void launch(const detail::KvSplitLaunch& l, cudaStream_t stream);
void launch(const detail::KvSplitBackwardLaunch& l, cudaStream_t stream);
void launch(const detail::YarnLaunch& l, cudaStream_t stream);

}  // namespace mlarope::cuda_launch
