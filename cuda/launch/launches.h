// SPDX-License-Identifier: Apache-2.0
// What the host API hands a backend stream: one launch descriptor per kernel family, with the
// kernel variant the dispatcher picked and the grid. Backends only map these to kernels.
#pragma once

#include <cstdint>

#include "kernels/grid.h"
#include "kernels/kernel_args.h"
#include "mlarope/types.h"

namespace mlarope::detail {

/// The kernel variants of the rope family (see dispatch.h for when each is picked).
enum class RopeVariant : std::uint8_t {
  chunked_vector,  ///< pair chunks of 4, 16-byte accesses: the fast path
  chunked_scalar,  ///< one pair per work item, element accesses: the general path
  staged_vector,  ///< in place with a layout change, emb_dim <= 512: slices staged in shared memory
  whole_slice_scalar,  ///< in place with a layout change, any emb_dim (cycle permutation)
};

/// The kernel variants of kv_split and kv_split_backward.
enum class KvVariant : std::uint8_t {
  vector,  ///< pair chunks of 4, 16-byte accesses on the rope slices
  scalar,  ///< one pair per work item
};

/// rope, rope_inplace, rope_backward, rope_backward_inplace.
struct RopeLaunch {
  kernels::GridShape grid;
  std::int64_t work = 0;  ///< work items per row (staged: per round) the block's threads share
  kernels::RopeKernelArgs args;
  DType dtype = DType::f32;
  RopeVariant variant = RopeVariant::chunked_scalar;
};

/// kv_split.
struct KvSplitLaunch {
  kernels::GridShape grid;
  std::int64_t work = 0;  ///< work items per row (staged: per round) the block's threads share
  kernels::KvSplitKernelArgs args;
  DType dtype = DType::f32;
  KvVariant variant = KvVariant::scalar;
};

/// kv_split_backward.
struct KvSplitBackwardLaunch {
  kernels::GridShape grid;
  std::int64_t work = 0;  ///< work items per row (staged: per round) the block's threads share
  kernels::KvSplitBackwardKernelArgs args;
  DType dtype = DType::f32;
  KvVariant variant = KvVariant::scalar;
};

/// yarn_tables.
struct YarnLaunch {
  kernels::GridShape grid;
  std::int64_t work = 0;  ///< work items per row (staged: per round) the block's threads share
  kernels::YarnKernelArgs args;
};

}  // namespace mlarope::detail
