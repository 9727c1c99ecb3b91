// SPDX-License-Identifier: Apache-2.0
// Bit-exact copies of one segment of every head of a row (nope parts, kv_split's k and v
// parts, pass-through rows), spread over the threads of a block: 16-byte accesses when the
// dispatcher found the pointers and strides aligned, element accesses otherwise.
#pragma once

#include <cstdint>

#include "kernels/portability.h"
#include "kernels/work_division.h"

namespace mlarope::kernels {

/// One segment of `length` elements at `src + h * src_head_stride` -> `dst + h * dst_head_stride`
/// for every head h < heads.
template <class T>
struct HeadSegments {
  const T* src = nullptr;
  T* dst = nullptr;
  std::int64_t src_head_stride = 0;
  std::int64_t dst_head_stride = 0;
  std::int64_t heads = 0;
  std::int64_t length = 0;
};

/// Copy every head's segment; the (head, item) pairs, an item being a 16-byte vector or an
/// element of the tail / of an unaligned segment, are shared out by share_of_items.
/// NOTE: with `vector`, src, dst and both head strides must be 16-byte aligned.
template <class T>
MLAROPE_HD inline void copy_head_segments(const HeadSegments<T>& s, bool vector, int thread,
                                          int num_threads) {
  constexpr std::int64_t kPerVector = 16 / static_cast<std::int64_t>(sizeof(T));
  const std::int64_t vectors = vector ? s.length / kPerVector : 0;
  const std::int64_t tail_start = vectors * kPerVector;
  const std::int64_t items = vectors + (s.length - tail_start);
  if (items == 0 || s.heads == 0) return;
  const ItemRange range = share_of_items(items * s.heads, thread, num_threads);
  if (range.begin >= range.end) return;
  // Walk (head, item) without dividing per item: the vectors of a head, then its tail. The
  // walk stops at range.end for any range: the device paths' ranges end at items * heads, where
  // k < range.end never fails before item < items does; the host's fast mode gives a thread one
  // contiguous range (share_of_items), which may start and end inside a head.
  std::int64_t head = quotient(range.begin, items);
  std::int64_t item = range.begin - head * items;
  for (std::int64_t k = range.begin; k < range.end;) {
    const T* src = s.src + head * s.src_head_stride;
    T* dst = s.dst + head * s.dst_head_stride;
    // GCOVR_EXCL_BR_START: k < range.end fails first only in ranges ending inside a head (above)
    for (; item < vectors && k < range.end; item += range.step, k += range.step)
      store_raw<16>(dst + item * kPerVector, load_raw<16>(src + item * kPerVector));
    for (; item < items && k < range.end; item += range.step, k += range.step) {
      // GCOVR_EXCL_BR_STOP
      const std::int64_t e = tail_start + (item - vectors);
      global_store(dst + e, global_load(src + e));
    }
    const std::int64_t wrapped = quotient(item, items);
    head += wrapped;
    item -= wrapped * items;
  }
}

}  // namespace mlarope::kernels
