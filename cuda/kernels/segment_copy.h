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

/// 16-byte vectors a thread loads before it stores any of them: a GPU keeps that many of a
/// thread's loads in flight, where one load then its store would wait a DRAM round trip per
/// vector (the timing model's bytes in flight; docs/kernels.md).
inline constexpr int kCopyBatch = 4;

/// The place of a thread's work item in a run of heads' segments of `vectors` items, moved on
/// by the thread's step without a division per item.
struct SegmentWalk {
  std::int64_t head, item, step_heads, step_items, vectors;

  MLAROPE_HD MLAROPE_INLINE void advance() {
    head += step_heads;
    item += step_items;
    if (item >= vectors) item -= vectors, ++head;
  }
};

/// copy_head_segments when every segment is whole 16-byte vectors: the thread's items (vector
/// n % vectors of head n / vectors) in batches of kBatch (kCopyBatch or more), each batch loaded
/// whole, then stored.
template <class T, int kBatch>
MLAROPE_HD inline void copy_head_vectors(const HeadSegments<T>& s, std::int64_t vectors,
                                         const ItemRange& range) {
  constexpr std::int64_t kPerVector = 16 / static_cast<std::int64_t>(sizeof(T));
  const std::int64_t step_heads = quotient(range.step, vectors);
  const std::int64_t first_head = quotient(range.begin, vectors);
  SegmentWalk next{first_head, range.begin - first_head * vectors, step_heads,
                   range.step - step_heads * vectors, vectors};
  for (std::int64_t k = range.begin; k < range.end; k += kBatch * range.step) {
    RawVector<16> batch[kBatch] = {};
    SegmentWalk w = next;
    MLAROPE_UNROLL
    for (int j = 0; j < kBatch; ++j, w.advance()) {
      if (k + j * range.step >= range.end) break;
      const T* src = s.src + w.head * s.src_head_stride + w.item * kPerVector;
      // SASS batch: kCopyBatch (ci/sass_batches.py: loaded in one run)
      batch[j] = load_raw<16>(src);
    }
    w = next;
    MLAROPE_UNROLL
    for (int j = 0; j < kBatch; ++j, w.advance()) {
      if (k + j * range.step >= range.end) break;
      store_raw<16>(s.dst + w.head * s.dst_head_stride + w.item * kPerVector, batch[j]);
    }
    next = w;  // kBatch items on (a batch cut short is the last)
  }
}

/// Copy every head's segment; the (head, item) pairs, an item being a 16-byte vector or an
/// element of the tail / of an unaligned segment, are shared out by share_of_items.
/// NOTE: with `vector`, src, dst and both head strides must be 16-byte aligned.
template <class T, int kBatch = kCopyBatch>
MLAROPE_HD inline void copy_head_segments(const HeadSegments<T>& s, bool vector, int thread,
                                          int num_threads) {
  constexpr std::int64_t kPerVector = 16 / static_cast<std::int64_t>(sizeof(T));
  const std::int64_t vectors = vector ? s.length / kPerVector : 0;
  const std::int64_t tail_start = vectors * kPerVector;
  const std::int64_t items = vectors + (s.length - tail_start);
  if (items == 0 || s.heads == 0) return;
  const ItemRange range = share_of_items(items * s.heads, thread, num_threads);
  if (range.begin >= range.end) return;
  if (tail_start == s.length) return copy_head_vectors<T, kBatch>(s, vectors, range);
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
