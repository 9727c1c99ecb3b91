// Kernel bodies of rope and rope_backward, out of place and in place (SPEC.md §4). One block
// iteration per row (grid-stride over rows); inside a row the threads share out pair chunks
// and head groups, so that a thread loads its table chunk once per row and loops over heads.
#pragma once

#include <cstdint>

#include "kernels/freq_row.h"
#include "kernels/kernel_args.h"
#include "kernels/pair_rotation.h"
#include "kernels/portability.h"
#include "kernels/segment_copy.h"

namespace mlarope::kernels {

/// Largest emb_dim of the whole-slice vector body (registers hold the whole slice).
inline constexpr std::int64_t kWholeSliceMaxEmbDim = 64;

/// Head groups of a row: how many threads share one pair chunk (each loops over its heads).
MLAROPE_HD MLAROPE_INLINE std::int64_t head_groups(std::int64_t chunks, std::int64_t heads,
                                                  int num_threads) {
  const std::int64_t by_threads = chunks > 0 ? num_threads / chunks : 1;
  const std::int64_t groups = by_threads < heads ? by_threads : heads;
  return groups < 1 ? 1 : groups;
}

/// Rows of a call.
MLAROPE_HD MLAROPE_INLINE std::int64_t row_count(const PositionArgs& p) {
  return p.seq_len * p.batch;
}


/// Rotate pairs first .. first + kPairs - 1 of heads group, group + groups, ... of one row.
template <class T, int kPairs>
MLAROPE_HD MLAROPE_INLINE void rotate_chunk_of_heads(const RopeKernelArgs& a, const T* in_slices,
                                                    T* out_slices, std::int64_t freq_row,
                                                    std::int64_t first, std::int64_t group,
                                                    std::int64_t groups) {
  const PairRotation& r = a.rotation;
  const std::int64_t half_dim = a.emb_dim / 2;
  const PairCoefficients<kPairs> k = load_coefficients<kPairs>(r, freq_row, half_dim, first);
  for (std::int64_t h = group; h < a.heads; h += groups) {
    const PairChunk<kPairs> x =
        load_pairs<T, kPairs>(in_slices + h * a.in.head_stride, r.read_layout, half_dim, first);
    store_pairs<T, kPairs>(out_slices + h * a.out.head_stride, r.write_layout, half_dim, first,
                           rotate(x, k));
  }
}

/// rope / rope_backward where each pair's read and write positions are owned by one thread:
/// out of place (any layouts), or in place with read_layout == write_layout.
/// kPairs == kVectorPairs: vector accesses (emb_dim % 8 == 0, aligned); 1: scalar.
template <class T, int kPairs>
MLAROPE_HD inline void rope_chunked_body(const RopeKernelArgs& a, const GridCoord& g) {
  const PositionArgs& p = a.positions;
  const std::int64_t chunks = a.emb_dim / 2 / kPairs;
  const std::int64_t groups = head_groups(chunks, a.heads, g.num_threads);
  const std::int64_t items = chunks * groups;
  const bool pass_all = call_passes_through(p, g);
  for (std::int64_t row = g.block; row < row_count(p); row += g.num_blocks) {
    const RowPlan plan = pass_all ? RowPlan{} : plan_row(p, row, g.thread == 0);
    const T* in = row_pointer<T>(a.in, row, p.batch);
    T* out = row_pointer<T>(a.out, row, p.batch);
    if (!plan.rotate) {  // pass through: copy the whole head out of place, untouched in place
      if (!a.in_place)
        copy_head_segments<T>({in, out, a.in.head_stride, a.out.head_stride, a.heads,
                               a.nope_dim + a.emb_dim},
                              a.copy_vector, g.thread, g.num_threads);
      continue;
    }
    if (!a.in_place)
      copy_head_segments<T>({in, out, a.in.head_stride, a.out.head_stride, a.heads, a.nope_dim},
                            a.copy_vector, g.thread, g.num_threads);
    for (std::int64_t item = g.thread; item < items; item += g.num_threads) {
      const std::int64_t group = quotient(item, chunks);
      const std::int64_t first = (item - group * chunks) * kPairs;
      rotate_chunk_of_heads<T, kPairs>(a, in + a.nope_dim, out + a.nope_dim, plan.freq_row, first,
                                       group, groups);
    }
  }
}

/// In place with read_layout != write_layout, emb_dim <= 64 and % 8 == 0: one thread owns a
/// head's whole rope slice and holds it in registers before writing any of it (DESIGN.md
/// rule 3). NOTE: the table row is re-read per head here (from cache).
template <class T>
MLAROPE_HD inline void rope_whole_slice_vector_body(const RopeKernelArgs& a, const GridCoord& g) {
  constexpr int kMaxChunks = static_cast<int>(kWholeSliceMaxEmbDim / (2 * kVectorPairs));
  const PositionArgs& p = a.positions;
  const PairRotation& r = a.rotation;
  const std::int64_t half_dim = a.emb_dim / 2;
  const std::int64_t chunks = half_dim / kVectorPairs;
  const bool pass_all = call_passes_through(p, g);
  for (std::int64_t row = g.block; row < row_count(p); row += g.num_blocks) {
    const RowPlan plan = pass_all ? RowPlan{} : plan_row(p, row, g.thread == 0);
    if (!plan.rotate) continue;  // in place: a pass-through row is left untouched
    T* slices = row_pointer<T>(a.out, row, p.batch) + a.nope_dim;
    for (std::int64_t h = g.thread; h < a.heads; h += g.num_threads) {
      T* slice = slices + h * a.out.head_stride;
      PairChunk<kVectorPairs> x[kMaxChunks] = {};
      MLAROPE_UNROLL
      for (int c = 0; c < kMaxChunks; ++c)
        if (c < chunks)
          x[c] = load_pairs<T, kVectorPairs>(slice, r.read_layout, half_dim, c * kVectorPairs);
      MLAROPE_UNROLL
      for (int c = 0; c < kMaxChunks; ++c) {
        if (c >= chunks) continue;
        const auto k = load_coefficients<kVectorPairs>(r, plan.freq_row, half_dim, c * kVectorPairs);
        store_pairs<T, kVectorPairs>(slice, r.write_layout, half_dim, c * kVectorPairs,
                                     rotate(x[c], k));
      }
    }
  }
}

/// Where the element at position j of a slice in layout `from` goes in layout `to`.
MLAROPE_HD MLAROPE_INLINE std::int64_t moved_position(std::int64_t j, PairLayout from,
                                                     PairLayout to, std::int64_t half_dim) {
  const bool is_v = from == PairLayout::half ? j >= half_dim : (j & 1) != 0;
  const std::int64_t i = from == PairLayout::half ? (is_v ? j - half_dim : j) : j / 2;
  return is_v ? v_position(to, i, half_dim) : u_position(to, i, half_dim);
}

/// Rearrange a slice from layout `from` to layout `to` in place, following the cycles of the
/// permutation (a cycle is moved from its smallest position); bit exact, O(1) extra memory.
template <class T>
MLAROPE_HD inline void permute_slice(T* slice, std::int64_t emb_dim, PairLayout from,
                                     PairLayout to) {
  const std::int64_t half_dim = emb_dim / 2;
  for (std::int64_t start = 0; start < emb_dim; ++start) {
    std::int64_t j = moved_position(start, from, to, half_dim);
    while (j > start) j = moved_position(j, from, to, half_dim);
    if (j < start) continue;  // this cycle was moved from a smaller position
    T carried = global_load(slice + start);
    for (j = moved_position(start, from, to, half_dim); j != start;
         j = moved_position(j, from, to, half_dim)) {
      const T next = global_load(slice + j);
      global_store(slice + j, carried);
      carried = next;
    }
    global_store(slice + start, carried);
  }
}

/// In place with read_layout != write_layout, any emb_dim: one thread owns a head's slice,
/// rotates every pair where it was read, then moves the pairs to the write layout.
template <class T>
MLAROPE_HD inline void rope_whole_slice_scalar_body(const RopeKernelArgs& a, const GridCoord& g) {
  const PositionArgs& p = a.positions;
  const PairRotation& r = a.rotation;
  const std::int64_t half_dim = a.emb_dim / 2;
  const bool pass_all = call_passes_through(p, g);
  for (std::int64_t row = g.block; row < row_count(p); row += g.num_blocks) {
    const RowPlan plan = pass_all ? RowPlan{} : plan_row(p, row, g.thread == 0);
    if (!plan.rotate) continue;
    T* slices = row_pointer<T>(a.out, row, p.batch) + a.nope_dim;
    for (std::int64_t h = g.thread; h < a.heads; h += g.num_threads) {
      T* slice = slices + h * a.out.head_stride;
      for (std::int64_t i = 0; i < half_dim; ++i) {
        const PairChunk<1> x = load_pairs<T, 1>(slice, r.read_layout, half_dim, i);
        store_pairs<T, 1>(slice, r.read_layout, half_dim, i,
                          rotate(x, load_coefficients<1>(r, plan.freq_row, half_dim, i)));
      }
      permute_slice(slice, a.emb_dim, r.read_layout, r.write_layout);
    }
  }
}

}  // namespace mlarope::kernels
