// SPDX-License-Identifier: Apache-2.0
// Kernel bodies of rope and rope_backward, out of place and in place (docs/semantics.md §4). One
// round per row (kernels/row_rounds.h: grid-stride over rows; the staged in-place body's rounds
// hold part of a row or several rows); inside a row the threads share out pair chunks and head
// groups, so that a thread loads its table chunk once per row and loops over heads.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/freq_row.h"
#include "kernels/host_slice_rotation.h"
#include "kernels/kernel_args.h"
#include "kernels/pair_rotation.h"
#include "kernels/portability.h"
#include "kernels/row_rounds.h"
#include "kernels/segment_copy.h"
#include "kernels/work_division.h"

namespace mlarope::kernels {

/// Largest emb_dim of the staged in-place body (a round holds at least one whole slice).
inline constexpr std::int64_t kStagedMaxEmbDim = 512;
/// Pair chunks (16 bytes each) that one round of the staged body holds in shared memory: two
/// DeepSeek-V3 rows of 128 heads in f16/bf16, one in f32. 32 KiB a block in flight: four
/// blocks an SM keep 128 KiB of loads in flight, where HBM3e wants 48 KiB and more.
inline constexpr std::int64_t kStagedChunks = 2048;
/// Chunks a thread of the staged body copies in one unrolled step (a round over 128 threads).
inline constexpr int kStagedBatch = 16;

/// Head groups of a row: how many threads share one pair chunk (each loops over its heads).
/// chunks >= 1: emb_dim >= 2 (validated), a multiple of 8 on the vector paths.
MLAROPE_HD MLAROPE_INLINE std::int64_t head_groups(std::int64_t chunks, std::int64_t heads,
                                                   int num_threads) {
  const std::int64_t by_threads = num_threads / chunks;
  const std::int64_t groups = by_threads < heads ? by_threads : heads;
  return groups < 1 ? 1 : groups;
}

/// Heads whose chunk a thread of the vector paths loads before it stores any (as kCopyBatch).
inline constexpr int kRotateBatch = 4;

/// Rotate pairs first .. first + kPairs - 1 of heads group, group + groups, ... of one row.
/// Vector chunks go in batches of kRotateBatch heads, each batch loaded whole, then rotated
/// and stored: in place the batch's stores go only where its own loads read.
template <class T, int kPairs>
MLAROPE_HD MLAROPE_INLINE void rotate_chunk_of_heads(const RopeKernelArgs& a, const T* in_slices,
                                                     T* out_slices, std::int64_t freq_row,
                                                     std::int64_t first, std::int64_t group,
                                                     std::int64_t groups) {
  const PairRotation& r = a.rotation;
  const std::int64_t half_dim = a.emb_dim / 2;
  const PairCoefficients<kPairs> k = load_coefficients<kPairs>(r, freq_row, half_dim, first);
  if constexpr (kPairs == kVectorPairs<T>) {
    for (std::int64_t h = group; h < a.heads; h += kRotateBatch * groups) {
      RawVector<16> batch[kRotateBatch] = {};
      MLAROPE_UNROLL
      for (int j = 0; j < kRotateBatch; ++j) {
        const std::int64_t head = h + j * groups;
        if (head >= a.heads) break;
        const T* slice = in_slices + head * a.in.head_stride;
        // SASS batch: kRotateBatch (ci/sass_batches.py: loaded in one run)
        batch[j] = load_pair_bits<T, kPairs>(slice, r.read_layout, half_dim, first);
      }
      MLAROPE_UNROLL
      for (int j = 0; j < kRotateBatch; ++j) {
        const std::int64_t head = h + j * groups;
        if (head >= a.heads) break;
        store_pairs<T, kPairs>(out_slices + head * a.out.head_stride, r.write_layout, half_dim,
                               first, rotate(pairs_of_bits<T, kPairs>(batch[j], r.read_layout), k));
      }
    }
  } else {
    for (std::int64_t h = group; h < a.heads; h += groups) {
      const PairChunk<kPairs> x =
          load_pairs<T, kPairs>(in_slices + h * a.in.head_stride, r.read_layout, half_dim, first);
      store_pairs<T, kPairs>(out_slices + h * a.out.head_stride, r.write_layout, half_dim, first,
                             rotate(x, k));
    }
  }
}

#if !defined(__CUDA_ARCH__)
/// Heads ahead whose slice the host's in-place branch prefetches (8: the best of 0, 4, 8, 16 at
/// DeepSeek-V3 shapes, bf16 and f32).
inline constexpr std::int64_t kPrefetchHeads = 8;

/// Prefetch the cache lines of [p, p + bytes) for writing. Always inlined (MLAROPE_INLINE): GCC
/// takes a function of prefetches alone for a const one and drops the calls to it.
MLAROPE_INLINE void prefetch_for_write(const void* p, std::size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (std::size_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, 1, 3);
}

/// rope_on_host's work on the heads of one row: kHalfDim pairs a slice, or `half_dim` where
/// kHalfDim is 0. A constant count gives the slice loops (host_slice_rotation.h) a fixed trip
/// count: no remainder code per loop, which at 32 pairs cost as much as the loops' work.
template <class T, class Runs, std::int64_t kHalfDim>
MLAROPE_INLINE void rope_heads_on_host(const RopeKernelArgs& a, const T* in, T* out,
                                       std::int64_t half_dim, const HostRowCoefficients& k,
                                       HostSlicePairs& x, T* rotated) {
  const PairRotation& r = a.rotation;
  const std::int64_t pairs = kHalfDim != 0 ? kHalfDim : half_dim;
  const std::size_t nope_bytes = static_cast<std::size_t>(a.nope_dim) * sizeof(T);
  const std::size_t slice_bytes = static_cast<std::size_t>(2 * pairs) * sizeof(T);
  for (std::int64_t h = 0; h < a.heads; ++h) {
    const T* src = in + h * a.in.head_stride;
    T* dst = out + h * a.out.head_stride;
    // In place, a head's slice is a short run a head stride from the next, which the
    // hardware prefetchers follow poorly: ask for the slice kPrefetchHeads ahead.
    if (a.in_place && h + kPrefetchHeads < a.heads)
      prefetch_for_write(dst + kPrefetchHeads * a.out.head_stride + a.nope_dim, slice_bytes);
    if (!a.in_place) host_stream_copy(dst, src, nope_bytes);  // the head read in order
    // In place the slice's lines are in cache already: plain stores. Out of place the slice is
    // written here, then streamed.
    rotate_whole_slice<Runs, kHalfDim>(k, src + a.nope_dim, r, pairs, x,
                                       a.in_place ? dst + a.nope_dim : rotated);
    if (!a.in_place) host_stream_copy(dst + a.nope_dim, rotated, slice_bytes);
  }
}

/// The host's fast mode of every rope body, shaped like the reference: thread 0 of each block
/// takes the whole row (its heads in memory order) and loads the row's coefficients once; per
/// head it reads the rope slice whole before writing any of it (so in place works for any pair of
/// layouts) and rotates it in loops over the pairs (host_slice_rotation.h); out of place it
/// writes the slice into a local buffer and streams the nope part and the slice to the output
/// (host_stream_copy), in place it stores the slice back.
/// Runs: the SIMD forms of its slice conversions (host_slice_rotation.h); inlined whole into
/// the caller, so that a caller compiled for AVX2 gets every loop of it in AVX2.
template <class T, class Runs = HostRuns>
MLAROPE_INLINE void rope_on_host(const RopeKernelArgs& a, const GridCoord& g) {
  const PositionArgs& p = a.positions;
  const std::int64_t half_dim = a.emb_dim / 2;
  if (g.thread != 0) return;
  const bool pass_all = call_passes_through(p, g);
  const std::size_t head_bytes = static_cast<std::size_t>(a.nope_dim + a.emb_dim) * sizeof(T);
  HostRowCoefficients k;
  HostSlicePairs x;
  T rotated[kHostRopeMaxEmbDim];
  for (std::int64_t row = g.block; row < row_count(p); row += g.num_blocks) {
    const RowPlan plan = pass_all ? RowPlan{} : plan_row(p, row, true);
    const T* in = row_pointer<T>(a.in, row, p.batch);
    T* out = row_pointer<T>(a.out, row, p.batch);
    if (!plan.rotate) {  // pass through: the whole head copied out of place, untouched in place
      if (!a.in_place)
        for (std::int64_t h = 0; h < a.heads; ++h)
          host_stream_copy(out + h * a.out.head_stride, in + h * a.in.head_stride, head_bytes);
      continue;
    }
    load_row_coefficients(a.rotation, plan.freq_row, half_dim, k);
    if (half_dim == kMlaHalfDim)
      rope_heads_on_host<T, Runs, kMlaHalfDim>(a, in, out, half_dim, k, x, rotated);
    else rope_heads_on_host<T, Runs, 0>(a, in, out, half_dim, k, x, rotated);
  }
  host_store_fence();
}

/// True where a rope body takes the host's fast branch (the fast mode, slices it can hold).
MLAROPE_INLINE bool rope_runs_on_host(const RopeKernelArgs& a) {
  return !MLAROPE_DEVICE_PATHS() && a.emb_dim <= kHostRopeMaxEmbDim;
}
#endif

/// rope / rope_backward where each pair's read and write positions are owned by one thread:
/// out of place (any layouts), or in place with read_layout == write_layout (a RowRounds work).
/// kPairs == kVectorPairs<T>: vector accesses (emb_dim % 8 == 0, aligned); 1: scalar.
template <class T, int kPairs>
struct RopeChunkedRows : RowsOfBlock<RopeKernelArgs> {
  MLAROPE_HD static void work(const RopeKernelArgs& a, const GridCoord& g, std::int64_t round,
                              const RowPlan& plan, Shared&) {
    const PositionArgs& p = a.positions;
    const std::int64_t row = row_of(a, g, round);
    const std::int64_t chunks = a.emb_dim / 2 / kPairs;
    const std::int64_t groups = head_groups(chunks, a.heads, g.num_threads);
    const std::int64_t items = chunks * groups;
    const T* in = row_pointer<T>(a.in, row, p.batch);
    T* out = row_pointer<T>(a.out, row, p.batch);
    if (!plan.rotate) {  // pass through: copy the whole head out of place, untouched in place
      if (!a.in_place)
        copy_head_segments<T>({in, out, a.in.head_stride, a.out.head_stride, a.heads,
                               a.nope_dim + a.emb_dim},
                              a.copy_vector, g.thread, g.num_threads);
      return;
    }
    if (!a.in_place)
      copy_head_segments<T, kPairs == 1 ? kCopyBatch : 2 * kCopyBatch>(
          {in, out, a.in.head_stride, a.out.head_stride, a.heads, a.nope_dim}, a.copy_vector,
          g.thread, g.num_threads);
    for (std::int64_t item = g.thread; item < items; item += g.num_threads) {
      const std::int64_t group = quotient(item, chunks);
      const std::int64_t first = (item - group * chunks) * kPairs;
      rotate_chunk_of_heads<T, kPairs>(a, in + a.nope_dim, out + a.nope_dim, plan.freq_row, first,
                                       group, groups);
    }
  }
};

/// Slices of one row per round of the staged body: as many whole slices of `chunks` pair
/// chunks as kStagedChunks holds, at least one, at most `heads`.
MLAROPE_HD MLAROPE_INLINE std::int64_t staged_slices_per_round(std::int64_t heads,
                                                               std::int64_t chunks) {
  const std::int64_t fit = kStagedChunks / chunks;  // chunks >= 1: emb_dim is a multiple of 8
  const std::int64_t n = fit < heads ? fit : heads;
  return n < 1 ? 1 : n;
}

/// Rows of one round of the staged body: as many whole rows as kStagedChunks holds, at most
/// kStagedMaxEmbDim / emb_dim (a round's coefficients, rows x chunks of a slice, fit the slots
/// of one slice of kStagedMaxEmbDim), at least one (a row of more chunks is split into rounds
/// of staged_slices_per_round slices).
MLAROPE_HD MLAROPE_INLINE std::int64_t staged_rows_per_round(std::int64_t heads,
                                                             std::int64_t chunks,
                                                             std::int64_t emb_dim) {
  // heads >= 1 and chunks >= 1: a call without heads writes nothing and launches nothing.
  const std::int64_t by_chunks = kStagedChunks / (heads * chunks);
  const std::int64_t by_slots = kStagedMaxEmbDim / emb_dim;  // emb_dim >= 8 on the vector paths
  const std::int64_t n = by_chunks < by_slots ? by_chunks : by_slots;
  return n < 1 ? 1 : n;
}

/// In place with read_layout != write_layout, vector-ready, emb_dim <= kStagedMaxEmbDim (a
/// PlannedRounds work). A round of a block takes whole rope slices, at most kStagedChunks pair
/// chunks: several whole rows where they fit (16 heads of emb 64: 8 rows), some slices of one
/// row where a row does not. Prepare, which has the round's plans, copies every chunk into
/// shared memory by asynchronous copies (no registers held while they are in flight) and
/// loads the coefficients of each row's pair chunks with them; work writes the rotated chunks
/// in the write layout and loads nothing from global memory, so a round waits for one batch.
/// Consecutive threads take consecutive chunks of a slice, so a warp reads and writes contiguous
/// memory; no element is written before every chunk of its slice was read (docs/architecture.md
/// rule 3). A pass-through row is read and left untouched.
template <class T>
struct RopeStagedRounds {
  using Args = RopeKernelArgs;
  static constexpr int kPairs = kVectorPairs<T>;
  /// Pair chunks of the widest slice: the coefficient slots of a round.
  static constexpr std::int64_t kSlots = kStagedMaxEmbDim / 2 / kPairs;
  /// The most rows of a round (emb_dim 8, every slice one chunk).
  static constexpr int kMaxRoundRows = static_cast<int>(kStagedMaxEmbDim / 8);
  using Plans = RoundPlans<kMaxRoundRows>;
  struct Shared {
    RawVector<16> staged[kStagedChunks];              ///< the round's chunks, as read
    SharedCoefficients<kPairs, kSlots> coefficients;  ///< by (row of the round, pair chunk)
  };
  /// The slices of a round: `heads` heads from `first_head` of each of its rows.
  struct Slices {
    RoundRows rows;
    std::int64_t first_head, heads;
  };

  MLAROPE_HD static std::int64_t chunks(const RopeKernelArgs& a) { return a.emb_dim / 2 / kPairs; }
  MLAROPE_HD static std::int64_t rows_per_round(const RopeKernelArgs& a) {
    return staged_rows_per_round(a.heads, chunks(a), a.emb_dim);
  }
  /// Slices of a row a round takes where a round is (part of) one row.
  MLAROPE_HD static std::int64_t per_round(const RopeKernelArgs& a) {
    return staged_slices_per_round(a.heads, chunks(a));
  }
  MLAROPE_HD static std::int64_t rounds_per_row(const RopeKernelArgs& a) {
    return (a.heads + per_round(a) - 1) / per_round(a);
  }
  MLAROPE_HD static std::int64_t call_rounds(const RopeKernelArgs& a) {
    const std::int64_t rows = row_count(a.positions), r = rows_per_round(a);
    return r > 1 ? (rows + r - 1) / r : rows * rounds_per_row(a);
  }
  /// Rounds of block g.block: rounds g.block, g.block + num_blocks, ... of the call's.
  MLAROPE_HD static std::int64_t rounds(const RopeKernelArgs& a, const GridCoord& g) {
    const std::int64_t total = call_rounds(a);
    return g.block < total ? (total - 1 - g.block) / g.num_blocks + 1 : 0;
  }
  /// The slices of this block's round `round` (the call's round g.block + round x blocks).
  MLAROPE_HD static Slices slices_of(const RopeKernelArgs& a, const GridCoord& g,
                                     std::int64_t round) {
    const std::int64_t n = g.block + round * g.num_blocks;
    const std::int64_t r = rows_per_round(a);
    if (r > 1) {
      const std::int64_t left = row_count(a.positions) - n * r;
      return {{n * r, left < r ? left : r, true}, 0, a.heads};
    }
    const std::int64_t row = quotient(n, rounds_per_row(a));
    const std::int64_t first_head = (n - row * rounds_per_row(a)) * per_round(a);
    const std::int64_t left = a.heads - first_head;
    return {{row, 1, first_head == 0}, first_head, left < per_round(a) ? left : per_round(a)};
  }
  MLAROPE_HD static RoundRows round_rows(const RopeKernelArgs& a, const GridCoord& g,
                                         std::int64_t round) {
    return slices_of(a, g, round).rows;
  }

  /// Where chunk n of a round lies: its row of the round, its slice (from first_head), its
  /// pair chunk.
  struct Place {
    std::int64_t row, head, chunk;
  };
  MLAROPE_HD static Place place_of(const RopeKernelArgs& a, const Slices& r, std::int64_t n) {
    const std::int64_t slice = quotient(n, chunks(a));
    const std::int64_t chunk = n - slice * chunks(a);
    if (r.rows.count == 1) return {0, slice, chunk};  // (part of) one row: no row to find
    const std::int64_t row = quotient(slice, r.heads);
    return {row, slice - row * r.heads, chunk};
  }
  /// The slice of chunk n's place; `first` is the round's first row's slices. A later row
  /// belongs to a round of whole rows, which starts at head 0.
  MLAROPE_HD static T* slice_pointer(const RopeKernelArgs& a, const Slices& r, T* first,
                                     const Place& at) {
    T* row = at.row == 0
                 ? first
                 : row_pointer<T>(a.out, r.rows.first + at.row, a.positions.batch) + a.nope_dim;
    return row + at.head * a.out.head_stride;
  }
  /// The slices of the round's first row, from its first head.
  MLAROPE_HD static T* first_row_slices(const RopeKernelArgs& a, const Slices& r) {
    return row_pointer<T>(a.out, r.rows.first, a.positions.batch) + a.nope_dim +
           r.first_head * a.out.head_stride;
  }
  /// The coefficients of slot c: pair chunk c % chunks of the round's row c / chunks, none
  /// for a row passed through.
  MLAROPE_HD static PairCoefficients<kPairs> slot_coefficients(const RopeKernelArgs& a,
                                                               const Plans& plans, std::int64_t c) {
    const std::int64_t row = quotient(c, chunks(a));
    const RowPlan plan = plans[row];
    if (!plan.rotate) return {};
    return load_coefficients<kPairs>(a.rotation, plan.freq_row, a.emb_dim / 2,
                                     (c - row * chunks(a)) * kPairs);
  }

  /// The round's chunks and its rows' coefficients into shared memory. Thread c < slots loads
  /// the coefficients of slot c before its first batch (slots beyond the block's threads, where
  /// a profile gives fewer threads, after it).
  MLAROPE_HD static void prepare(const RopeKernelArgs& a, const GridCoord& g, std::int64_t round,
                                 const Plans& plans, Shared& s) {
    const Slices r = slices_of(a, g, round);
    const std::int64_t slots = r.rows.count * chunks(a);
    const bool coefficient_thread = g.thread < slots;
    PairCoefficients<kPairs> k{};
    if (coefficient_thread) k = slot_coefficients(a, plans, g.thread);
    stage_chunks(a, g, r, s);
    if (coefficient_thread) s.coefficients.store(g.thread, k);
    for (std::int64_t c = g.thread + g.num_threads; c < slots; c += g.num_threads)
      s.coefficients.store(c, slot_coefficients(a, plans, c));
  }

  MLAROPE_HD static void work(const RopeKernelArgs& a, const GridCoord& g, std::int64_t round,
                              const Plans& plans, Shared& s) {
    rotate_chunks(a, g, slices_of(a, g, round), plans, s);
  }

  /// Prepare: chunk n of the round into shared memory by asynchronous copies, which hold no
  /// registers while in flight: a thread's every chunk of the round is in flight at once,
  /// kStagedBatch of them issued an unrolled step (a row passed through is copied too: asking
  /// its plan for every chunk costs registers, and such rows are rare).
  MLAROPE_HD static void stage_chunks(const RopeKernelArgs& a, const GridCoord& g, const Slices& r,
                                      Shared& s) {
    const std::int64_t items = r.rows.count * r.heads * chunks(a);
    T* first = first_row_slices(a, r);
    const std::int64_t step = std::int64_t{kStagedBatch} * g.num_threads;
    for (std::int64_t base = g.thread; base < items; base += step) {
      MLAROPE_UNROLL
      for (int j = 0; j < kStagedBatch; ++j) {
        const std::int64_t n = base + std::int64_t{j} * g.num_threads;
        if (n >= items) break;
        const Place at = place_of(a, r, n);
        // SASS batch: kStagedBatch (ci/sass_batches.py: issued in one run)
        copy_pair_bits_to_shared<T, kPairs>(&s.staged[n], slice_pointer(a, r, first, at),
                                            a.rotation.read_layout, a.emb_dim / 2,
                                            at.chunk * kPairs);
      }
    }
    wait_async_copies();
  }

  /// Work: the rotated chunks of the rows that rotate, from shared memory into the write layout.
  MLAROPE_HD static void rotate_chunks(const RopeKernelArgs& a, const GridCoord& g, const Slices& r,
                                       const Plans& plans, Shared& s) {
    const std::int64_t items = r.rows.count * r.heads * chunks(a);
    T* first = first_row_slices(a, r);
    for (std::int64_t n = g.thread; n < items; n += g.num_threads) {  // the round's chunk n
      const Place at = place_of(a, r, n);
      if (!plans[at.row].rotate) continue;  // in place: a pass-through row is left untouched
      const PairChunk<kPairs> held =
          pairs_of_bits<T, kPairs>(shared_load(&s.staged[n]), a.rotation.read_layout);
      store_pairs<T, kPairs>(slice_pointer(a, r, first, at), a.rotation.write_layout, a.emb_dim / 2,
                             at.chunk * kPairs,
                             rotate(held, s.coefficients.load(at.row * chunks(a) + at.chunk)));
    }
  }
};

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

/// In place with read_layout != write_layout, any emb_dim (a RowRounds work): one thread owns
/// a head's slice, rotates every pair where it was read, then moves the pairs to the write
/// layout.
template <class T>
struct RopeWholeSliceRows : RowsOfBlock<RopeKernelArgs> {
  MLAROPE_HD static void work(const RopeKernelArgs& a, const GridCoord& g, std::int64_t round,
                              const RowPlan& plan, Shared&) {
    if (!plan.rotate) return;
    const PositionArgs& p = a.positions;
    const PairRotation& r = a.rotation;
    const std::int64_t half_dim = a.emb_dim / 2;
    const std::int64_t row = row_of(a, g, round);
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
};

}  // namespace mlarope::kernels
