// SPDX-License-Identifier: Apache-2.0
// Kernel bodies of kv_split and kv_split_backward (docs/semantics.md §4). A round per row
// (row_rounds.h); the k_pe rope slice is rotated once per row (per pair chunk) and broadcast to
// every key head, and the backward sums the heads in f32 (in kv_sum_groups' fixed order) before the
// adjoint rotation.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/freq_row.h"
#include "kernels/host_slice_rotation.h"
#include "kernels/kernel_args.h"
#include "kernels/pair_rotation.h"
#include "kernels/portability.h"
#include "kernels/rope_kernels.h"
#include "kernels/segment_copy.h"
#include "kernels/work_division.h"

namespace mlarope::kernels {

/// key[..., :k] = kv[..., :k] and value = kv[..., k:] for every head of one row, in batches of
/// kBatch vectors.
template <class T, int kBatch>
MLAROPE_HD MLAROPE_INLINE void copy_kv_parts(const KvSplitKernelArgs& a, const T* kv, T* key,
                                             T* value, const GridCoord& g) {
  const HeadSegments<T> k_part{kv, key, a.kv.head_stride, a.key.head_stride, a.heads, a.k_dim};
  copy_head_segments<T, kBatch>(k_part, a.copy_vector, g.thread, g.num_threads);
  const HeadSegments<T> v_part{kv + a.k_dim,        value,   a.kv.head_stride,
                               a.value.head_stride, a.heads, a.v_dim};
  copy_head_segments<T, kBatch>(v_part, a.copy_vector, g.thread, g.num_threads);
}

#if !defined(__CUDA_ARCH__)
/// Largest emb_dim of the host's fast kv_split (its rotated slice lives on the stack).
inline constexpr std::int64_t kHostKvMaxEmbDim = 512;

/// The host's fast mode of kv_split (KvSplitRows), shaped like the reference: thread 0 of each
/// block takes the whole row, rotates its k_pe once (as the fast rope rotates a slice,
/// host_slice_rotation.h), and writes each key and value head in one pass (k part, rotated
/// slice, v part), each part one streaming copy.
template <class T>
inline void kv_split_on_host(const KvSplitKernelArgs& a, const GridCoord& g) {
  if (g.thread != 0) return;
  const PositionArgs& p = a.positions;
  const PairRotation& r = a.rotation;
  const std::int64_t half_dim = a.emb_dim / 2;
  const bool pass_all = call_passes_through(p, g);
  T slice[kHostKvMaxEmbDim];
  static_assert(kHostKvMaxEmbDim <= kHostRopeMaxEmbDim, "a slice the slice functions can hold");
  HostRowCoefficients coefficients;
  HostSlicePairs pairs;
  const std::size_t k_bytes = static_cast<std::size_t>(a.k_dim) * sizeof(T);
  const std::size_t v_bytes = static_cast<std::size_t>(a.v_dim) * sizeof(T);
  const std::size_t slice_bytes = static_cast<std::size_t>(a.emb_dim) * sizeof(T);
  for (std::int64_t row = g.block; row < row_count(p); row += g.num_blocks) {
    const RowPlan plan = pass_all ? RowPlan{} : plan_row(p, row, true);
    const T* k_pe = row_pointer<T>(a.k_pe, row, p.batch);
    if (!plan.rotate) {  // pass through: k_pe unrotated, bit for bit
      std::memcpy(slice, k_pe, slice_bytes);
    } else {
      load_row_coefficients(r, plan.freq_row, half_dim, coefficients);
      read_slice(k_pe, r.read_layout, half_dim, pairs);
      rotate_slice(coefficients, half_dim, pairs);
      write_slice(slice, r.write_layout, half_dim, pairs);
    }
    const T* kv = row_pointer<T>(a.kv, row, p.batch);
    T* key = row_pointer<T>(a.key, row, p.batch);
    T* value = row_pointer<T>(a.value, row, p.batch);
    for (std::int64_t h = 0; h < a.heads; ++h) {  // kv may be null when k + v = 0
      const T* kv_head = kv + h * a.kv.head_stride;
      T* key_head = key + h * a.key.head_stride;
      host_stream_copy(key_head, kv_head, k_bytes);
      host_stream_copy(key_head + a.k_dim, slice, slice_bytes);
      host_stream_copy(value + h * a.value.head_stride, kv_head + a.k_dim, v_bytes);
    }
  }
  host_store_fence();
}
#endif

/// Vectors a thread of kv_split and kv_split_backward copies per batch: twice kCopyBatch on
/// the vector paths, whose kernels have the registers for it (cuda_kv_split.cu), kCopyBatch on
/// the scalar ones.
template <int kPairs>
inline constexpr int kKvCopyBatch = kPairs == 1 ? kCopyBatch : 2 * kCopyBatch;

/// kv_split (a RowRounds work). kPairs == kVectorPairs<T>: vector accesses on the rope
/// slices; 1: scalar.
template <class T, int kPairs>
struct KvSplitRows : RowsOfBlock<KvSplitKernelArgs> {
  MLAROPE_HD static void work(const KvSplitKernelArgs& a, const GridCoord& g, std::int64_t round,
                              const RowPlan& plan, Shared&) {
    const PositionArgs& p = a.positions;
    const PairRotation& r = a.rotation;
    const std::int64_t row = row_of(a, g, round);
    const std::int64_t half_dim = a.emb_dim / 2;
    const std::int64_t chunks = half_dim / kPairs;
    const std::int64_t groups = head_groups(chunks, a.heads, g.num_threads);
    const std::int64_t items = chunks * groups;
    const T* kv = row_pointer<T>(a.kv, row, p.batch);
    const T* k_pe = row_pointer<T>(a.k_pe, row, p.batch);
    T* key = row_pointer<T>(a.key, row, p.batch);
    T* value = row_pointer<T>(a.value, row, p.batch);
    copy_kv_parts<T, kKvCopyBatch<kPairs>>(a, kv, key, value, g);
    if (!plan.rotate) {  // pass through: k_pe unrotated into every key head
      const HeadSegments<T> unrotated{k_pe,    key + a.k_dim, 0, a.key.head_stride,
                                      a.heads, a.emb_dim};
      copy_head_segments<T>(unrotated, false, g.thread, g.num_threads);
      return;
    }
    for (std::int64_t item = g.thread; item < items; item += g.num_threads) {
      const std::int64_t group = quotient(item, chunks);
      const std::int64_t first = (item - group * chunks) * kPairs;
      const PairChunk<kPairs> y =
          rotate(load_pairs<T, kPairs>(k_pe, r.read_layout, half_dim, first),
                 load_coefficients<kPairs>(r, plan.freq_row, half_dim, first));
      for (std::int64_t h = group; h < a.heads; h += groups)
        store_pairs<T, kPairs>(key + h * a.key.head_stride + a.k_dim, r.write_layout, half_dim,
                               first, y);
    }
  }
};

/// grad_kv[..., :k] = grad_key[..., :k] and grad_kv[..., k:] = grad_value for one row, in
/// batches of kBatch vectors.
template <class T, int kBatch>
MLAROPE_HD MLAROPE_INLINE void copy_grad_kv_parts(const KvSplitBackwardKernelArgs& a,
                                                  const T* grad_key, const T* grad_value,
                                                  T* grad_kv, const GridCoord& g) {
  const HeadSegments<T> k_part{grad_key, grad_kv, a.grad_key.head_stride, a.grad_kv.head_stride,
                               a.heads,  a.k_dim};
  copy_head_segments<T, kBatch>(k_part, a.copy_vector, g.thread, g.num_threads);
  const HeadSegments<T> v_part{
      grad_value, grad_kv + a.k_dim, a.grad_value.head_stride, a.grad_kv.head_stride, a.heads,
      a.v_dim};
  copy_head_segments<T, kBatch>(v_part, a.copy_vector, g.thread, g.num_threads);
}

/// sum += x, pair by pair (the head sums' one addition, in f32).
template <int kPairs>
MLAROPE_HD MLAROPE_INLINE void add_pairs(PairChunk<kPairs>& sum, const PairChunk<kPairs>& x) {
  MLAROPE_SIMD
  for (int j = 0; j < kPairs; ++j) {
    sum.u[j] += x.u[j];
    sum.v[j] += x.v[j];
  }
}

/// Shared-memory slots of kv_split_backward's partial head sums (one per thread of a block).
inline constexpr std::int64_t kKvSumSlots = 128;

/// The order of kv_split_backward's f32 head sums, fixed by the call's shape so that every
/// backend and run gives the same bits: the heads are dealt into G groups (group k: heads k,
/// k + G, k + 2G, ..., summed in that order from 0), and the G partial sums are added in group
/// order (group 0 first). G = min(heads, kKvSumSlots / chunks), at least 1 (chunks: pair
/// chunks of a rope slice), so that chunks x G partial sums fit in a block's shared memory.
MLAROPE_HD MLAROPE_INLINE std::int64_t kv_sum_groups(std::int64_t heads, std::int64_t chunks) {
  const std::int64_t fit = kKvSumSlots / (chunks > 0 ? chunks : 1);
  const std::int64_t n = fit < heads ? fit : heads;
  return n < 1 ? 1 : n;
}

/// A chunk of zeros.
template <int kPairs>
MLAROPE_HD MLAROPE_INLINE PairChunk<kPairs> zero_pairs() {
  PairChunk<kPairs> z;
  MLAROPE_SIMD
  for (int j = 0; j < kPairs; ++j) z.u[j] = z.v[j] = 0.0f;
  return z;
}

/// Heads of a group whose chunks a thread of the vector paths loads before it adds any: the
/// loads of a batch are in flight together, and the sum waits for each batch before the next.
inline constexpr int kSumBatch = 8;

/// Loads of the partial sums a thread of the vector paths has in flight together where the
/// groups are short (KvSplitBackwardRows::stage_short_group_sums): at kSumBatch, the register
/// budget of kv_split_backward (96) spills.
inline constexpr int kShortSumBatch = 4;

/// Group `group`'s partial sum of pairs first .. first + kPairs - 1 of the key rope slices:
/// heads group, group + groups, ... in order, in f32 (in batches of kSumBatch heads on the
/// vector paths; the order of the additions is the same).
template <class T, int kPairs>
MLAROPE_HD MLAROPE_INLINE PairChunk<kPairs> group_sum(const KvSplitBackwardKernelArgs& a,
                                                      const T* grad_key, std::int64_t first,
                                                      std::int64_t group, std::int64_t groups) {
  const PairLayout layout = a.rotation.read_layout;
  const std::int64_t half_dim = a.emb_dim / 2;
  const T* slices = grad_key + a.k_dim;
  PairChunk<kPairs> sum = zero_pairs<kPairs>();
  if constexpr (kPairs == kVectorPairs<T>) {
    for (std::int64_t h = group; h < a.heads; h += kSumBatch * groups) {
      RawVector<16> batch[kSumBatch] = {};
      MLAROPE_UNROLL
      for (int j = 0; j < kSumBatch; ++j) {
        const std::int64_t head = h + j * groups;
        if (head >= a.heads) break;
        const T* slice = slices + head * a.grad_key.head_stride;
        // SASS batch: kSumBatch (ci/sass_batches.py: loaded in one run)
        batch[j] = load_pair_bits<T, kPairs>(slice, layout, half_dim, first);
      }
      MLAROPE_UNROLL
      for (int j = 0; j < kSumBatch; ++j) {
        if (h + j * groups >= a.heads) break;
        add_pairs(sum, pairs_of_bits<T, kPairs>(batch[j], layout));
      }
      MLAROPE_END_LOAD_BATCH();
    }
  } else {
    for (std::int64_t h = group; h < a.heads; h += groups) {
      add_pairs(sum, load_pairs<T, kPairs>(slices + h * a.grad_key.head_stride, layout, half_dim,
                                           first));
      MLAROPE_END_LOAD_BATCH();
    }
  }
  return sum;
}

/// Heads up to which a thread of the vector paths sums a pair chunk over every head itself
/// (KvSplitBackwardRows::work_summed_by_chunk): two batches of kSumBatch loads.
inline constexpr std::int64_t kChunkSumMaxHeads = std::int64_t{2} * kSumBatch;

/// The head sum of pairs first .. first + kPairs - 1 of the key rope slices in kv_sum_groups'
/// order, by one thread: group 0's heads (0, groups, 2 groups, ...) added from 0, then that
/// partial sum added to the total, then group 1's, ... (group_sum and added_partial_sums give
/// the same bits: a sum begun at +0 is never -0). Heads are loaded kSumBatch at a time, in
/// that order.
template <class T, int kPairs>
MLAROPE_HD MLAROPE_INLINE PairChunk<kPairs> ordered_head_sum(const KvSplitBackwardKernelArgs& a,
                                                             const T* grad_key, std::int64_t first,
                                                             std::int64_t groups) {
  const PairLayout layout = a.rotation.read_layout;
  const std::int64_t half_dim = a.emb_dim / 2;
  const T* slices = grad_key + a.k_dim;
  PairChunk<kPairs> total = zero_pairs<kPairs>();
  PairChunk<kPairs> partial = zero_pairs<kPairs>();
  std::int64_t group = 0, head = 0;  // where the next batch starts
  for (std::int64_t done = 0; done < a.heads; done += kSumBatch) {
    RawVector<16> batch[kSumBatch] = {};
    std::int64_t g = group, h = head;
    MLAROPE_UNROLL
    for (int j = 0; j < kSumBatch; ++j) {
      if (done + j >= a.heads) break;
      // SASS batch: kSumBatch (ci/sass_batches.py: loaded in one run)
      batch[j] =
          load_pair_bits<T, kPairs>(slices + h * a.grad_key.head_stride, layout, half_dim, first);
      h = h + groups < a.heads ? h + groups : ++g;
    }
    // A slot past the last head holds zeros, and only the last batch has such slots: adding
    // +0 leaves a sum begun at +0 as it was (such a sum is never -0), so every slot is added.
    g = group, h = head;
    MLAROPE_UNROLL
    for (int j = 0; j < kSumBatch; ++j) {
      add_pairs(partial, pairs_of_bits<T, kPairs>(batch[j], layout));
      if (h + groups < a.heads) {
        h += groups;
        continue;
      }
      add_pairs(total, partial);  // group g's last head: its partial sum joins the total
      partial = zero_pairs<kPairs>();
      h = ++g;
    }
    group = g, head = h;
    // Only the GPU model and the device run this path: the fast mode takes
    // kv_split_backward_on_host up to emb_dim 512, and past it (65 chunks or more) its blocks,
    // a thread per 256 items, have fewer threads than chunks unless k and v run to thousands.
    MLAROPE_END_LOAD_BATCH();  // GCOVR_EXCL_BR_LINE: never without the model (above)
  }
  return total;
}

/// Pairs first .. first + kPairs - 1 of grad_k_pe from their head sum: rotated by the adjoint,
/// or (a pass-through row) unrotated, positions kept.
template <class T, int kPairs>
MLAROPE_HD MLAROPE_INLINE void store_grad_k_pe_chunk(const PairRotation& r, T* grad_k_pe,
                                                     const RowPlan& plan, std::int64_t half_dim,
                                                     std::int64_t first,
                                                     const PairChunk<kPairs>& sum) {
  if (plan.rotate)
    store_pairs<T, kPairs>(grad_k_pe, r.write_layout, half_dim, first,
                           rotate(sum,
                                  load_coefficients<kPairs>(r, plan.freq_row, half_dim, first)));
  else store_pairs<T, kPairs>(grad_k_pe, r.read_layout, half_dim, first, sum);
}

/// kv_split_backward (a RowRounds work). kPairs == kVectorPairs<T>: vector accesses on the
/// rope slices; 1: scalar. Prepare: the grad_kv copies and the partial head sums
/// (kv_sum_groups: chunks x groups work items, consecutive threads on consecutive chunks of one
/// head, so a warp reads contiguous slices) into shared memory. Work: the partial sums added in
/// group order, rotated by the adjoint (or passed through) into grad_k_pe. With one group
/// (chunks > kKvSumSlots / 2, or one head) the work phase sums the heads itself; with few heads
/// (summed_by_chunk) it takes the whole row, a thread summing each chunk and the rest copying.
template <class T, int kPairs>
struct KvSplitBackwardRows : RowsOfBlock<KvSplitBackwardKernelArgs> {
  struct Shared {
    SharedChunks<kPairs, kKvSumSlots> partial;  ///< slot group x chunks + chunk
  };

  MLAROPE_HD static std::int64_t chunks(const KvSplitBackwardKernelArgs& a) {
    return a.emb_dim / 2 / kPairs;
  }

  MLAROPE_HD static void prepare(const KvSplitBackwardKernelArgs& a, const GridCoord& g,
                                 std::int64_t round, Shared& s) {
    if (summed_by_chunk(a, g)) return;  // the work phase does it all
    const PositionArgs& p = a.positions;
    const std::int64_t row = row_of(a, g, round);
    const std::int64_t groups = kv_sum_groups(a.heads, chunks(a));
    const T* grad_key = row_pointer<T>(a.grad_key, row, p.batch);
    copy_grad_kv_parts<T, kKvCopyBatch<kPairs>>(a, grad_key,
                                                row_pointer<T>(a.grad_value, row, p.batch),
                                                row_pointer<T>(a.grad_kv, row, p.batch), g);
    if (groups < 2) return;  // one group: the work phase sums the heads itself
    if constexpr (kPairs == kVectorPairs<T>) {
      if (a.heads <= kShortSumBatch * groups) {
        stage_short_group_sums(a, g, grad_key, groups, s);
        return;
      }
    }
    stage_partial_sums(a, g, grad_key, groups, s);
  }

  MLAROPE_HD static void work(const KvSplitBackwardKernelArgs& a, const GridCoord& g,
                              std::int64_t round, const RowPlan& plan, Shared& s) {
    const PositionArgs& p = a.positions;
    const std::int64_t row = row_of(a, g, round);
    if constexpr (kPairs == kVectorPairs<T>)
      if (summed_by_chunk(a, g)) return work_summed_by_chunk(a, g, row, plan);
    const std::int64_t groups = kv_sum_groups(a.heads, chunks(a));
    const T* grad_key = row_pointer<T>(a.grad_key, row, p.batch);
    T* grad_k_pe = row_pointer<T>(a.grad_k_pe, row, p.batch);
    for (std::int64_t c = g.thread; c < chunks(a); c += g.num_threads) {
      const PairChunk<kPairs> sum = groups > 1
                                        ? added_partial_sums(a, c, groups, s)
                                        : group_sum<T, kPairs>(a, grad_key, c * kPairs, 0, 1);
      store_grad_k_pe_chunk<T, kPairs>(a.rotation, grad_k_pe, plan, a.emb_dim / 2, c * kPairs, sum);
    }
  }

  /// Whether the block's first chunks(a) threads each sum one pair chunk over every head and
  /// the rest copy (work_summed_by_chunk): on the vector paths, for few heads (at most
  /// kChunkSumMaxHeads) and a block with threads left for the copies.
  MLAROPE_HD static bool summed_by_chunk(const KvSplitBackwardKernelArgs& a, const GridCoord& g) {
    if constexpr (kPairs == kVectorPairs<T>)
      return a.heads <= kChunkSumMaxHeads && chunks(a) < g.num_threads;
    return false;
  }

  /// The whole row in the work phase, with no staging: thread c < chunks sums chunk c over
  /// every head (ordered_head_sum) and writes grad_k_pe's chunk; the other threads copy grad_kv.
  /// One phase with loads, where the staged sums take two (a phase's end waits for its slowest
  /// warp).
  MLAROPE_HD static void work_summed_by_chunk(const KvSplitBackwardKernelArgs& a,
                                              const GridCoord& g, std::int64_t row,
                                              const RowPlan& plan) {
    const PositionArgs& p = a.positions;
    const T* grad_key = row_pointer<T>(a.grad_key, row, p.batch);
    const int summers = static_cast<int>(chunks(a));
    if (g.thread >= summers) {
      GridCoord copier = g;
      copier.thread -= summers;
      copier.num_threads -= summers;
      copy_grad_kv_parts<T, kKvCopyBatch<kPairs>>(a, grad_key,
                                                  row_pointer<T>(a.grad_value, row, p.batch),
                                                  row_pointer<T>(a.grad_kv, row, p.batch), copier);
      return;
    }
    const std::int64_t first = std::int64_t{g.thread} * kPairs;
    store_grad_k_pe_chunk<T, kPairs>(
        a.rotation, row_pointer<T>(a.grad_k_pe, row, p.batch), plan, a.emb_dim / 2, first,
        ordered_head_sum<T, kPairs>(a, grad_key, first, kv_sum_groups(a.heads, chunks(a))));
  }

  /// Prepare: partial sum n = group x chunks + chunk into slot n.
  MLAROPE_HD static void stage_partial_sums(const KvSplitBackwardKernelArgs& a, const GridCoord& g,
                                            const T* grad_key, std::int64_t groups, Shared& s) {
    for (std::int64_t n = g.thread; n < groups * chunks(a); n += g.num_threads) {
      const std::int64_t group = quotient(n, chunks(a));
      s.partial.store(n, group_sum<T, kPairs>(a, grad_key, (n - group * chunks(a)) * kPairs, group,
                                              groups));
    }
  }

  /// Prepare, where no group holds more than kShortSumBatch heads (the vector paths): group_sum's
  /// partial sums, in its order, but one batch holds the heads of as many of a thread's items as
  /// it fits (group_sum waits once per item: at 16 heads, once per head in f16/bf16).
  MLAROPE_HD static void stage_short_group_sums(const KvSplitBackwardKernelArgs& a,
                                                const GridCoord& g, const T* grad_key,
                                                std::int64_t groups, Shared& s) {
    static_assert(kPairs == kVectorPairs<T>, "vector chunks only");
    const PairLayout layout = a.rotation.read_layout;
    const std::int64_t half_dim = a.emb_dim / 2;
    const T* slices = grad_key + a.k_dim;
    const std::int64_t items = groups * chunks(a);
    const int per_item = static_cast<int>((a.heads + groups - 1) / groups);  // <= kShortSumBatch
    const int per_batch = kShortSumBatch / per_item;
    for (std::int64_t n = g.thread; n < items; n += std::int64_t{per_batch} * g.num_threads) {
      // The batch's items n, n + threads, ...: per_batch of them, fewer at the end.
      const std::int64_t left = (items - 1 - n) / g.num_threads + 1;
      const int slots = per_item * (left < per_batch ? static_cast<int>(left) : per_batch);
      RawVector<16> batch[kShortSumBatch] = {};
      int i = 0, k = 0;  // slot j: the k-th head of the batch's i-th item
      MLAROPE_UNROLL
      for (int j = 0; j < kShortSumBatch; ++j) {
        if (j == slots) break;
        const std::int64_t item = n + std::int64_t{i} * g.num_threads;
        const std::int64_t group = quotient(item, chunks(a));
        const std::int64_t head = group + k * groups;
        if (head < a.heads)
          // SASS batch: kShortSumBatch (ci/sass_batches.py: loaded in one run)
          batch[j] = load_pair_bits<T, kPairs>(slices + head * a.grad_key.head_stride, layout,
                                               half_dim, (item - group * chunks(a)) * kPairs);
        if (++k == per_item) k = 0, ++i;
      }
      // A slot past its group's last head holds zeros: adding +0 leaves a sum begun at +0
      // as it was (such a sum is never -0), so the slots are added unconditionally.
      PairChunk<kPairs> sum = zero_pairs<kPairs>();
      i = 0, k = 0;
      MLAROPE_UNROLL
      for (int j = 0; j < kShortSumBatch; ++j) {
        if (j == slots) break;
        add_pairs(sum, pairs_of_bits<T, kPairs>(batch[j], layout));
        if (++k < per_item) continue;
        s.partial.store(n + std::int64_t{i} * g.num_threads, sum);
        sum = zero_pairs<kPairs>(), k = 0, ++i;
      }
      // Only the GPU model and the device run this path: the fast mode takes the device bodies
      // only beyond emb_dim 512, where one group holds every head.
      MLAROPE_END_LOAD_BATCH();  // GCOVR_EXCL_BR_LINE: never without the model (above)
    }
  }

  /// Work: the head sum of chunk c, its groups' partial sums added in group order.
  MLAROPE_HD static PairChunk<kPairs> added_partial_sums(const KvSplitBackwardKernelArgs& a,
                                                         std::int64_t c, std::int64_t groups,
                                                         Shared& s) {
    PairChunk<kPairs> sum = s.partial.load(c);
    for (std::int64_t group = 1; group < groups; ++group)
      add_pairs(sum, s.partial.load(group * chunks(a) + c));
    return sum;
  }
};

#if !defined(__CUDA_ARCH__)
/// The host's fast mode of kv_split_backward (emb_dim <= kHostKvMaxEmbDim): thread 0 of each
/// block takes the whole row in one pass over its heads (grad_kv = [grad_key k part,
/// grad_value], two streaming copies a head, and the head's rope slice added to its group's
/// partial sums), so every byte of grad_key is read once. The sums are KvSplitBackwardRows',
/// in kv_sum_groups' order, bit for bit.
template <class T, int kPairs>
inline void kv_split_backward_on_host(const KvSplitBackwardKernelArgs& a, const GridCoord& g) {
  constexpr std::int64_t kMaxChunks = kHostKvMaxEmbDim / 2 / kPairs;
  constexpr std::int64_t kSlots = kMaxChunks > kKvSumSlots ? kMaxChunks : kKvSumSlots;
  if (g.thread != 0) return;
  const PositionArgs& p = a.positions;
  const PairRotation& r = a.rotation;
  const std::int64_t half_dim = a.emb_dim / 2;
  const std::int64_t chunks = half_dim / kPairs;
  const std::int64_t groups = kv_sum_groups(a.heads, chunks);
  const bool pass_all = call_passes_through(p, g);
  const std::size_t k_bytes = static_cast<std::size_t>(a.k_dim) * sizeof(T);
  const std::size_t v_bytes = static_cast<std::size_t>(a.v_dim) * sizeof(T);
  PairChunk<kPairs> partial[kSlots];  // group x chunks + chunk
  for (std::int64_t row = g.block; row < row_count(p); row += g.num_blocks) {
    const RowPlan plan = pass_all ? RowPlan{} : plan_row(p, row, true);
    const T* grad_key = row_pointer<T>(a.grad_key, row, p.batch);
    const T* grad_value = row_pointer<T>(a.grad_value, row, p.batch);
    T* grad_kv = row_pointer<T>(a.grad_kv, row, p.batch);
    for (std::int64_t n = 0; n < groups * chunks; ++n) partial[n] = zero_pairs<kPairs>();
    for (std::int64_t h = 0, group = 0; h < a.heads; ++h) {  // the views may be null when empty
      const T* key_head = grad_key + h * a.grad_key.head_stride;
      T* kv_head = grad_kv + h * a.grad_kv.head_stride;
      host_stream_copy(kv_head, key_head, k_bytes);
      host_stream_copy(kv_head + a.k_dim, grad_value + h * a.grad_value.head_stride, v_bytes);
      PairChunk<kPairs>* sums = partial + group * chunks;
      for (std::int64_t c = 0; c < chunks; ++c)
        add_pairs(sums[c],
                  load_pairs<T, kPairs>(key_head + a.k_dim, r.read_layout, half_dim, c * kPairs));
      group = group + 1 == groups ? 0 : group + 1;
    }
    T* grad_k_pe = row_pointer<T>(a.grad_k_pe, row, p.batch);
    for (std::int64_t c = 0; c < chunks; ++c) {
      PairChunk<kPairs> sum = partial[c];
      for (std::int64_t group = 1; group < groups; ++group)
        add_pairs(sum, partial[group * chunks + c]);
      store_grad_k_pe_chunk<T, kPairs>(r, grad_k_pe, plan, half_dim, c * kPairs, sum);
    }
  }
  host_store_fence();
}
#endif

}  // namespace mlarope::kernels
