// Which table row a row uses (SPEC.md §2), computed on the device from the device metadata,
// which is never trusted for memory access: every index read stays inside its array.
#pragma once

#include <cstdint>

#include "kernels/kernel_args.h"
#include "kernels/portability.h"

namespace mlarope::kernels {

/// What a row does: rotate with table row `freq_row`, or pass through.
struct RowPlan {
  std::int64_t freq_row = 0;
  bool rotate = false;
};

/// CP position of local position `lp` in a local sequence of length `len` (SPEC.md §2).
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

/// Global tokens before sequence i: cu[i] - cu[0].
MLAROPE_HD MLAROPE_INLINE std::int64_t global_start(const PositionArgs& p, std::int64_t i) {
  return static_cast<std::int64_t>(global_load(p.cu_seqlens + i)) - global_load(p.cu_seqlens);
}

/// Local start of sequence i: (cu[i] - cu[0]) / cp_size.
MLAROPE_HD MLAROPE_INLINE std::int64_t local_start(const PositionArgs& p, std::int64_t i) {
  return quotient(global_start(p, i), p.cp_size);
}

/// The sequence of THD row r: the largest i in [0, N] with local_start(i) <= r (N: padding),
/// by binary search; local_start(i) <= r is tested as cu[i] - cu[0] <= r * cp_size.
/// NOTE: valid only once the cu_seqlens check passed (non-decreasing, lengths divisible by
/// cp_size).
MLAROPE_HD MLAROPE_INLINE std::int64_t find_sequence(const PositionArgs& p, std::int64_t r) {
  const std::int64_t global_row = r * p.cp_size;
  std::int64_t lo = 0, hi = p.num_sequences;  // local_start(lo) <= r always (it is 0)
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo + 1) / 2;
    if (global_start(p, mid) <= global_row) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/// Element r of the position_ids array.
MLAROPE_HD MLAROPE_INLINE std::int64_t position_id(const PositionArgs& p, std::int64_t r) {
  if (p.position_ids_type == IndexType::i64) return global_load(static_cast<const std::int64_t*>(p.position_ids) + r);
  return global_load(static_cast<const std::int32_t*>(p.position_ids) + r);
}

/// The plan of THD row r (the call-level cu_seqlens gate is applied before).
MLAROPE_HD MLAROPE_INLINE RowPlan plan_thd_row(const PositionArgs& p, std::int64_t r, bool report) {
  const std::int64_t i = find_sequence(p, r);
  if (i >= p.num_sequences) return {0, false};  // padding row
  const std::int64_t start = global_load(p.cu_seqlens + i);
  const std::int64_t len = quotient(static_cast<std::int64_t>(global_load(p.cu_seqlens + i + 1)) - start, p.cp_size);
  std::int64_t freq_row = cp_pos(r - local_start(p, i), len, p.cp_size, p.cp_rank);
  if (p.freq_mode == FreqMode::packed) freq_row += start;
  if (p.seq_offsets != nullptr) freq_row += global_load(p.seq_offsets + i);
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

/// True when every row of the call passes through because cu_seqlens broke a rule. The
/// per-sequence rules come from the check kernel (scratch word); the total-length rule
/// (cu[N] - cu[0] > T * cp_size) is applied here, only when those hold, and reported once.
MLAROPE_HD MLAROPE_INLINE bool call_passes_through(const PositionArgs& p, const GridCoord& g) {
  if (p.layout != TokenLayout::thd) return false;
  if (load_word(p.cu_check) != 0) return true;
  const std::int64_t total =
      static_cast<std::int64_t>(global_load(p.cu_seqlens + p.num_sequences)) - global_load(p.cu_seqlens);
  if (total <= p.seq_len * p.cp_size) return false;
  if (g.block == 0 && g.thread == 0 && p.status != nullptr) atomic_or(p.status, kStatusBadCuSeqlens);
  return true;
}

/// The plan of a row; `report` marks the one thread of the block that raises status bits.
MLAROPE_HD MLAROPE_INLINE RowPlan plan_row(const PositionArgs& p, std::int64_t row, bool report) {
  return p.layout == TokenLayout::thd ? plan_thd_row(p, row, report)
                                      : plan_sbhd_row(p, row, report);
}

/// The check kernel body: ORs the per-sequence cu_seqlens bits into the scratch word and the
/// caller's word. One thread per sequence (grid-stride).
MLAROPE_HD inline void cu_seqlens_check_body(const CuSeqlensCheckArgs& a, const GridCoord& g) {
  const std::int64_t stride = g.num_blocks * g.num_threads;
  for (std::int64_t i = g.block * g.num_threads + g.thread; i < a.num_sequences; i += stride) {
    const std::int64_t length = static_cast<std::int64_t>(global_load(a.cu_seqlens + i + 1)) - global_load(a.cu_seqlens + i);
    DeviceStatus bits = kStatusOk;
    if (length < 0) bits = kStatusBadCuSeqlens;
    else if (a.cp_size > 1 && length % (2 * a.cp_size) != 0) bits = kStatusBadSeqLength;
    if (bits == kStatusOk) continue;
    atomic_or(a.cu_check, bits);
    if (a.status != nullptr) atomic_or(a.status, bits);
  }
}

}  // namespace mlarope::kernels
