// SPDX-License-Identifier: Apache-2.0
// Which table row a row uses (docs/semantics.md §2), computed on the device from the device
// metadata, which is never trusted for memory access: every index read stays inside its array.
#pragma once

#include <cstdint>

#include "kernels/kernel_args.h"
#include "kernels/portability.h"
#include "kernels/work_division.h"

namespace mlarope::kernels {

/// What a row does: rotate with table row `freq_row`, or pass through.
struct RowPlan {
  std::int64_t freq_row = 0;
  bool rotate = false;
};

/// Rows of a call.
MLAROPE_HD MLAROPE_INLINE std::int64_t row_count(const PositionArgs& p) {
  return p.seq_len * p.batch;
}

/// CP position of local position `lp` in a local sequence of length `len` (docs/semantics.md §2).
MLAROPE_HD MLAROPE_INLINE std::int64_t cp_pos(std::int64_t lp, std::int64_t len,
                                              std::int64_t cp_size, std::int64_t cp_rank) {
  if (cp_size == 1) return lp;
  const std::int64_t half = len / 2;
  if (lp < half) return cp_rank * half + lp;
  return len * cp_size - (cp_rank + 1) * half + (lp - half);
}

/// A plan for `freq_row`: rotate when it lies inside the table, else pass through and raise
/// kStatusRowOutsideTable (by the reporting thread only, to keep atomics few).
MLAROPE_HD MLAROPE_INLINE RowPlan checked_plan(const PositionArgs& p, std::int64_t freq_row,
                                               bool report) {
  if (freq_row >= 0 && freq_row < p.table_rows) return {freq_row, true};
  if (report && p.status != nullptr) atomic_or(p.status, kStatusRowOutsideTable);
  return {0, false};
}

/// The sequence of a THD row, with the cu_seqlens entries its plan needs.
struct RowSequence {
  std::int64_t index;  ///< i: the row's sequence, or N for a padding row
  std::int64_t first;  ///< cu[0]
  std::int64_t start;  ///< cu[i]
  std::int64_t end;    ///< cu[i + 1] (where i < N)
};

/// Entries of cu_seqlens a step of find_sequence reads together.
inline constexpr int kSearchProbes = 8;

/// The most sequences of a call whose cu_seqlens the gate's checking threads, which load every
/// entry anyway, leave in the block's shared memory (GateSlots) for the rows' plans: their
/// searches then run there and wait for no load of cu_seqlens. Above it the searches load
/// their entries. (A sample of every k-th entry for larger calls would put a variable stride
/// into the gate's stores, which cost the chunked bodies register spills.)
inline constexpr int kSharedSequences = 255;

/// The copy of cu_seqlens in a block's shared memory, where N <= kSharedSequences.
struct SharedCuSeqlens {
  std::int32_t entry[kSharedSequences + 1];
};

/// Probe k of a search step over [lo, hi]: lo + k * step, at most hi.
template <class Index>
MLAROPE_HD MLAROPE_INLINE Index probe(Index lo, int k, Index step, Index hi) {
  return lo + k * step < hi ? lo + k * step : hi;
}

/// A search's candidates left, [lo, hi], and the entries it keeps: those at 0, lo and hi + 1
/// (where hi is below the last candidate it started with). Index: of cu_seqlens (64 bits) or
/// of the shared copy (32 bits: fewer registers where the plan runs beside loads in flight).
template <class Index>
struct SearchSpan {
  Index lo;
  Index hi;
  std::int32_t first = 0;
  std::int32_t at_lo = 0;
  std::int32_t above_hi = 0;
};

/// The steps of a search (find_sequence) over rising entries (index 0 first) for the last
/// whose distance from entry 0 is at most `global_row`; `load(at, entry, probes)` brings the
/// entries at the step's first `probes` positions, all in flight together (one round trip).
/// Each step keeps the span from the last probe that passes to before the first that fails,
/// and the entries of those two probes.
template <class Index, class Load>
MLAROPE_HD MLAROPE_INLINE void search_steps(const Load& load, std::int64_t global_row,
                                            SearchSpan<Index>& s) {
  while (s.lo < s.hi) {
    const Index step = (s.hi - s.lo + kSearchProbes) / kSearchProbes;  // ceil(n / K)
    int probes = 1;  // distinct: those below hi, and hi where they are fewer than all
    MLAROPE_UNROLL
    for (int k = 1; k < kSearchProbes; ++k) probes += s.lo + (k - 1) * step < s.hi ? 1 : 0;
    Index at[kSearchProbes];
    std::int32_t entry[kSearchProbes] = {};
    MLAROPE_UNROLL
    for (int k = 0; k < kSearchProbes; ++k) at[k] = probe(s.lo, k, step, s.hi);
    load(at, entry, probes);
    if (s.lo == 0) s.first = entry[0];
    // The probes rise and those that pass come first, probe lo among them. Every entry is
    // tested before the span is chosen: a loop that stopped at the first that fails would let
    // the compiler sink each load below the test of the one before, one round trip each.
    int pass = 0;
    MLAROPE_UNROLL
    for (int k = 0; k < kSearchProbes; ++k)
      pass += k < probes && entry[k] - s.first <= global_row ? 1 : 0;
    // The kept entries, of the last passing probe and the first failing one, by a select over
    // the probes (an array indexed by `pass` would go to local memory).
    MLAROPE_UNROLL
    for (int k = 0; k < kSearchProbes; ++k) {
      if (k < pass) s.at_lo = entry[k];
      else if (k == pass && k < probes) s.above_hi = entry[k];
    }
    const Index last_passing = probe(s.lo, pass - 1, step, s.hi);
    if (pass < probes) s.hi = probe(s.lo, pass, step, s.hi) - 1;
    s.lo = last_passing;
  }
}

/// A search step's entries from cu_seqlens in global memory.
struct CuSeqlensEntries {
  const std::int32_t* cu;
  MLAROPE_HD MLAROPE_INLINE void operator()(const std::int64_t (&at)[kSearchProbes],
                                            std::int32_t (&entry)[kSearchProbes],
                                            int probes) const {
    // SASS batch: kSearchProbes
    load_index_batch(cu, at, entry, probes);
  }
};

/// A search step's entries from the copy of cu_seqlens in shared memory.
struct SharedEntries {
  const SharedCuSeqlens* shared_cu;
  MLAROPE_HD MLAROPE_INLINE void operator()(const int (&at)[kSearchProbes],
                                            std::int32_t (&entry)[kSearchProbes],
                                            int probes) const {
    MLAROPE_UNROLL
    for (int k = 0; k < kSearchProbes; ++k)
      if (k < probes) entry[k] = shared_load(&shared_cu->entry[at[k]]);
  }
};

/// The sequence of THD row r: the largest i in [0, N] whose local start (cu[i] - cu[0]) /
/// cp_size is at most r (N: padding), tested as cu[i] - cu[0] <= r * cp_size. With
/// `shared_cu`, the copy the block's gate has filled (where N <= kSharedSequences), the search
/// runs over it in shared memory; otherwise over cu_seqlens, kSearchProbes entries a step: n
/// candidates take about log8(n) round trips where halving takes log2(n). When one candidate i
/// is left, the kept entries are cu[i] and cu[i + 1] (i < N: a probe of i + 1 failed), so the
/// start and end need no load of their own.
/// NOTE: meaningful only where the cu_seqlens gate is open (non-decreasing, lengths divisible
/// by cp_size); elsewhere it still reads inside the array (or the copy) and ends: lo is always
/// an entry that passed (cu[0] first), and each step keeps fewer candidates than it had.
MLAROPE_HD MLAROPE_INLINE RowSequence find_sequence(const PositionArgs& p, std::int64_t r,
                                                    const SharedCuSeqlens* shared_cu = nullptr) {
  const std::int64_t global_row = r * p.cp_size;
  const std::int64_t n = p.num_sequences;
  if (shared_cu != nullptr && n <= kSharedSequences) {
    SearchSpan<int> s{0, static_cast<int>(n)};
    search_steps(SharedEntries{shared_cu}, global_row, s);
    return RowSequence{s.lo, s.first, s.at_lo, s.above_hi};
  }
  SearchSpan<std::int64_t> s{0, n};
  search_steps(CuSeqlensEntries{p.cu_seqlens}, global_row, s);
  return RowSequence{s.lo, s.first, s.at_lo, s.above_hi};
}

/// Element r of the position_ids array.
MLAROPE_HD MLAROPE_INLINE std::int64_t position_id(const PositionArgs& p, std::int64_t r) {
  if (p.position_ids_type == IndexType::i64)
    return global_load(static_cast<const std::int64_t*>(p.position_ids) + r);
  return global_load(static_cast<const std::int32_t*>(p.position_ids) + r);
}

/// The plan of THD row r (where the call-level cu_seqlens gate is open), its search started
/// over `shared_cu` where there is one.
MLAROPE_HD MLAROPE_INLINE RowPlan plan_thd_row(const PositionArgs& p, std::int64_t r, bool report,
                                               const SharedCuSeqlens* shared_cu) {
  const RowSequence seq = find_sequence(p, r, shared_cu);
  if (seq.index >= p.num_sequences) return {0, false};  // padding row
  const std::int64_t len = quotient(seq.end - seq.start, p.cp_size);
  const std::int64_t local_start = quotient(seq.start - seq.first, p.cp_size);
  std::int64_t freq_row = cp_pos(r - local_start, len, p.cp_size, p.cp_rank);
  if (p.freq_mode == FreqMode::packed) freq_row += seq.start;
  if (p.seq_offsets != nullptr) freq_row += global_load(p.seq_offsets + seq.index);
  if (p.position_ids != nullptr) freq_row = position_id(p, r);
  return checked_plan(p, freq_row, report);
}

/// The plan of SBHD row `row` = s * B + b.
MLAROPE_HD MLAROPE_INLINE RowPlan plan_sbhd_row(const PositionArgs& p, std::int64_t row,
                                                bool report) {
  const std::int64_t s = p.batch == 1 ? row : quotient(row, p.batch);
  std::int64_t freq_row = cp_pos(s, p.seq_len, p.cp_size, p.cp_rank);
  if (p.seq_offsets != nullptr) freq_row += global_load(p.seq_offsets + (row - s * p.batch));
  return checked_plan(p, freq_row, report);
}

// ---- The call-level cu_seqlens gate (docs/semantics.md §5)
// ------------------------------------------- A THD call whose cu_seqlens breaks a rule passes
// every row through. There is no launch before the main kernel to check it: each block checks the
// whole array itself (its threads take a share of the sequences, a barrier, then one thread
// combines), before it writes anything; block 0 alone reports the bits to the caller's status word.

/// Threads of a block that check sequences (one shared word each).
inline constexpr int kGateSlots = 128;

/// What check_sequences leaves in a block's shared memory: each checking thread's bits, cu[0]
/// and cu[N] for gate_closed, and the copy of cu_seqlens for the rows' plans (N <=
/// kSharedSequences), all stored by the threads whose share loaded them, so that the
/// total-length rule needs no load (and no round trip) of its own and a search none at all.
/// The copy comes before the ends: the GPU model's bounds are those of the block's whole shared
/// memory, and an entry stored past the copy lands on cu[0], which another thread stores in the
/// same phase (a race the model reports).
struct GateSlots {
  DeviceStatus bits[kGateSlots];
  SharedCuSeqlens cu;  ///< where 0 < N <= kSharedSequences
  std::int32_t first;  ///< cu[0] (where N > 0)
  std::int32_t last;   ///< cu[N] (where N > 0)
};

/// Status bits of a sequence of `length` (global) rows under the per-sequence rules: a
/// decreasing cu_seqlens, or a length not divisible by 2 * cp_size.
MLAROPE_HD MLAROPE_INLINE DeviceStatus length_bits(const PositionArgs& p, std::int64_t length) {
  if (length < 0) return kStatusBadCuSeqlens;
  if (p.cp_size > 1 && length % (2 * p.cp_size) != 0) return kStatusBadSeqLength;
  return kStatusOk;
}

/// Consecutive sequences [i, j) as checked: their status bits, cu[i] and cu[j].
struct SequenceSpan {
  DeviceStatus bits;
  std::int32_t from;
  std::int32_t to;
};

/// Entries cu[i .. i + K) as loaded by a unit of the gate's check, of which it owns the first
/// K - 1 (and the last where it is cu[N]; every entry has one owner): where N <=
/// kSharedSequences and `shared_cu` is there (not on the host's fast path), they go into it.
template <int K>
MLAROPE_HD MLAROPE_INLINE void share_entries(const PositionArgs& p, SharedCuSeqlens* shared_cu,
                                             std::int64_t i, const std::int32_t (&entry)[K]) {
  if (shared_cu == nullptr || p.num_sequences > kSharedSequences) return;
  const int owned = i + K - 1 == p.num_sequences ? K : K - 1;
  MLAROPE_UNROLL
  for (int k = 0; k < K; ++k)
    if (k < owned) shared_store(&shared_cu->entry[i + k], entry[k]);
}

/// Sequence i.
MLAROPE_HD MLAROPE_INLINE SequenceSpan check_sequence(const PositionArgs& p, std::int64_t i,
                                                      SharedCuSeqlens* shared_cu = nullptr) {
  const std::int64_t at[2] = {i, i + 1};
  std::int32_t entry[2];
  load_index_batch(p.cu_seqlens, at, entry);
  share_entries(p, shared_cu, i, entry);
  return {length_bits(p, static_cast<std::int64_t>(entry[1]) - entry[0]), entry[0], entry[1]};
}

/// The gate's verdict from the per-sequence bits and the sequences' total length
/// cu[N] - cu[0]: closed (true) when a rule is broken. The total-length rule (at most the
/// call's T * cp_size rows) is applied only when the per-sequence rules hold; block 0 reports it.
MLAROPE_HD MLAROPE_INLINE bool gate_verdict(const PositionArgs& p, const GridCoord& g,
                                            DeviceStatus bits, std::int64_t total) {
  if (bits != kStatusOk) return true;
  if (total <= p.seq_len * p.cp_size) return false;
  if (g.block == 0 && p.status != nullptr) atomic_or(p.status, kStatusBadCuSeqlens);
  return true;
}

/// Sequences [i, i + 4): cu[i .. i + 3] in one 16-byte load (cu + i aligned to 16 bytes) and
/// cu[i + 4], in flight together.
MLAROPE_HD MLAROPE_INLINE SequenceSpan check_four_sequences(const PositionArgs& p, std::int64_t i,
                                                            SharedCuSeqlens* shared_cu) {
  // Only the GPU model and the device run this: the host's fast branches check the gate with
  // call_passes_through, a sequence at a time.
  MLAROPE_BEGIN_INDEX_BATCH();  // GCOVR_EXCL_BR_LINE: never without the model (above)
  const RawVector<16> v = load_raw<16>(p.cu_seqlens + i);
  const std::int32_t last = global_load(p.cu_seqlens + i + 4);
  MLAROPE_END_INDEX_BATCH();  // GCOVR_EXCL_BR_LINE: never without the model (above)
  const std::int32_t entry[5] = {static_cast<std::int32_t>(v.words[0]),
                                 static_cast<std::int32_t>(v.words[1]),
                                 static_cast<std::int32_t>(v.words[2]),
                                 static_cast<std::int32_t>(v.words[3]), last};
  share_entries(p, shared_cu, i, entry);
  DeviceStatus bits = kStatusOk;
  for (int k = 0; k < 4; ++k) {
    if (entry[k + 1] < entry[k]) bits |= kStatusBadCuSeqlens;
    else if (p.cp_size > 1)
      bits |= length_bits(p, static_cast<std::int64_t>(entry[k + 1]) - entry[k]);
  }
  return {bits, entry[0], last};
}

/// First phase of a gated body: thread t < kGateSlots stores into slot t the bits of its share
/// of the sequences (n = the block's checking threads): the sequences before the first entry
/// aligned to 16 bytes and those after the last whole group of four one at a time, the groups
/// between four at a time (a 16-byte load and one more entry: half a load a sequence, where
/// one at a time takes two). The threads of the first and the last unit store cu[0] and cu[N],
/// each unit the entries it owns into the copy of cu_seqlens (N <= kSharedSequences). Block 0
/// reports the bits.
MLAROPE_HD MLAROPE_INLINE void check_sequences(const PositionArgs& p, const GridCoord& g,
                                               GateSlots& slots) {
  const int n = g.num_threads < kGateSlots ? g.num_threads : kGateSlots;
  if (g.thread >= n) return;
  const auto address = reinterpret_cast<std::uintptr_t>(p.cu_seqlens);
  std::int64_t head =
      static_cast<std::int64_t>((16 - address % 16) % 16 / 4);  // entries to alignment
  if (head > p.num_sequences) head = p.num_sequences;
  const std::int64_t groups = (p.num_sequences - head) / 4;
  const std::int64_t units = p.num_sequences - 3 * groups;  // lone sequences and groups
  DeviceStatus bits = kStatusOk;
  for (std::int64_t u = g.thread; u < units; u += n) {
    const SequenceSpan span = u >= head && u < head + groups
                                  ? check_four_sequences(p, head + 4 * (u - head), &slots.cu)
                                  : check_sequence(p, u < head ? u : u + 3 * groups, &slots.cu);
    bits |= span.bits;
    if (u == 0) shared_store(&slots.first, span.from);
    if (u == units - 1) shared_store(&slots.last, span.to);
  }
  shared_store(slots.bits + g.thread, bits);
  if (bits != kStatusOk && g.block == 0 && p.status != nullptr) atomic_or(p.status, bits);
}

/// After check_sequences and a barrier, by one thread of the block: true when every row of the
/// call passes through.
MLAROPE_HD MLAROPE_INLINE bool gate_closed(const PositionArgs& p, const GridCoord& g,
                                           const GateSlots& slots) {
  const int n = g.num_threads < kGateSlots ? g.num_threads : kGateSlots;
  DeviceStatus bits = kStatusOk;
  for (int t = 0; t < n; ++t) bits |= shared_load(slots.bits + t);
  const std::int64_t total =
      p.num_sequences > 0
          ? static_cast<std::int64_t>(shared_load(&slots.last)) - shared_load(&slots.first)
          : 0;
  return gate_verdict(p, g, bits, total);
}

#if !defined(__CUDA_ARCH__)
/// The gate as one thread decides it alone (the host's fast branches, whose thread 0 does the
/// whole block's work): every sequence checked, block 0 reporting. SBHD: always open.
inline bool call_passes_through(const PositionArgs& p, const GridCoord& g) {
  if (p.layout != TokenLayout::thd) return false;
  DeviceStatus bits = kStatusOk;
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < p.num_sequences; ++i) {
    const SequenceSpan span = check_sequence(p, i);
    bits |= span.bits;
    total += static_cast<std::int64_t>(span.to) - span.from;  // cu[N] - cu[0] at the end
  }
  if (bits != kStatusOk && g.block == 0 && p.status != nullptr) atomic_or(p.status, bits);
  return gate_verdict(p, g, bits, total);
}
#endif

/// The plan of a row; `report` marks the one thread of the block that raises status bits;
/// `shared_cu`, the copy of cu_seqlens the block's gate has filled (THD; none on the host's fast
/// path).
MLAROPE_HD MLAROPE_INLINE RowPlan plan_row(const PositionArgs& p, std::int64_t row, bool report,
                                           const SharedCuSeqlens* shared_cu = nullptr) {
  return p.layout == TokenLayout::thd ? plan_thd_row(p, row, report, shared_cu)
                                      : plan_sbhd_row(p, row, report);
}

}  // namespace mlarope::kernels
