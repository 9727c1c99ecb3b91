// SPDX-License-Identifier: Apache-2.0
// How a kernel divides its work among threads: cheap quotients of indices, and each thread's
// share of a run of work items (coalesced on the device paths, contiguous in the fast mode).
#pragma once

#include <cstdint>

#include "kernels/portability.h"

namespace mlarope::kernels {

/// a / b for 0 <= a and 0 < b, in 32-bit arithmetic when both fit: a 64-bit division is
/// a long instruction sequence on GPUs, and kernel indices almost always fit in 32 bits.
MLAROPE_HD MLAROPE_INLINE std::int64_t quotient(std::int64_t a, std::int64_t b) {
  if (((a | b) >> 32) == 0)
    return static_cast<std::int64_t>(static_cast<std::uint32_t>(a) / static_cast<std::uint32_t>(b));
  return a / b;
}

/// The share of `items` work items of thread `thread` of `num_threads`: items begin,
/// begin + step, ... < end. On the device paths consecutive threads take consecutive items
/// (coalesced accesses); in the host's fast mode each thread takes one contiguous range
/// (streaming accesses). Either way every item belongs to exactly one thread.
struct ItemRange {
  std::int64_t begin, end, step;
};
MLAROPE_HD MLAROPE_INLINE ItemRange share_of_items(std::int64_t items, int thread,
                                                   int num_threads) {
  if (MLAROPE_DEVICE_PATHS()) return {thread, items, num_threads};
  return {items * thread / num_threads, items * (thread + 1) / num_threads, 1};
}

}  // namespace mlarope::kernels
