// SPDX-License-Identifier: Apache-2.0
// The plain argument structs of the kernel bodies: pointers, element strides and flags, all
// copied by value into a launch (and into a captured graph). No RoPE math here.
#pragma once

#include <cstdint>

#include "kernels/element_io.h"
#include "kernels/grid.h"
#include "kernels/portability.h"
#include "kernels/work_division.h"
#include "mlarope/status.h"
#include "mlarope/types.h"

namespace mlarope::kernels {

/// Rows of an activation: SBHD [S, B, H, D] (row = s * B + b) or THD [T, H, D] (B = 1).
template <class Void>
struct ActivationView {
  Void* data = nullptr;
  std::int64_t seq_stride = 0;    ///< elements between consecutive s (THD: rows)
  std::int64_t batch_stride = 0;  ///< elements between consecutive b (THD: unused)
  std::int64_t head_stride = 0;   ///< elements between heads
};

/// Element offset of the start of `row` of a view with `batch` rows per s.
template <class Void>
MLAROPE_HD MLAROPE_INLINE std::int64_t row_offset(const ActivationView<Void>& v, std::int64_t row,
                                                  std::int64_t batch) {
  if (batch == 1) return row * v.seq_stride;
  const std::int64_t s = quotient(row, batch);
  return s * v.seq_stride + (row - s * batch) * v.batch_stride;
}

/// Typed pointer to the start of `row`.
template <class T>
MLAROPE_HD MLAROPE_INLINE const T* row_pointer(const ActivationView<const void>& v,
                                               std::int64_t row, std::int64_t batch) {
  return static_cast<const T*>(v.data) + row_offset(v, row, batch);
}
template <class T>
MLAROPE_HD MLAROPE_INLINE T* row_pointer(const ActivationView<void>& v, std::int64_t row,
                                         std::int64_t batch) {
  return static_cast<T*>(v.data) + row_offset(v, row, batch);
}

/// How the rows of a call find their table row (docs/semantics.md §2), as the device sees it.
struct PositionArgs {
  TokenLayout layout = TokenLayout::sbhd;
  FreqMode freq_mode = FreqMode::per_sequence;
  std::int64_t seq_len = 0;  ///< S (SBHD) or T (THD)
  std::int64_t batch = 1;    ///< B (SBHD) or 1 (THD)
  std::int64_t cp_size = 1;
  std::int64_t cp_rank = 0;
  std::int64_t table_rows = 0;
  const std::int32_t* cu_seqlens = nullptr;  ///< THD: [num_sequences + 1]
  std::int64_t num_sequences = 0;
  const void* position_ids = nullptr;  ///< THD, optional: [T]
  IndexType position_ids_type = IndexType::i32;
  const std::int32_t* seq_offsets = nullptr;  ///< optional: [B] or [N]
  DeviceStatus* status = nullptr;             ///< the caller's status word, optional
};

/// The rotation of a call as a kernel applies it: read positions, write positions and the
/// coefficients' roles. rope reads in_layout and writes out_layout; the adjoint the reverse.
struct PairRotation {
  PairLayout read_layout = PairLayout::interleaved;
  PairLayout write_layout = PairLayout::half;
  PairLayout table_layout = PairLayout::half;
  float sign = 1.0f;     ///< sg: -1 for inverse
  bool adjoint = false;  ///< rope_backward / kv_split_backward
  DType table_dtype = DType::f32;
  /// f32 tables in the half layout whose rows are 16-byte aligned (emb_dim % 8 == 0): the
  /// vector paths read a chunk's u and v coefficients as runs of kPairs floats.
  bool table_vector = false;
  TableView cos;
  TableView sin;
};

/// rope and rope_backward, out of place or in place (then `in` and `out` are the same memory).
struct RopeKernelArgs {
  ActivationView<const void> in;  ///< t or grad_out
  ActivationView<void> out;       ///< out or grad_t
  std::int64_t heads = 0;
  std::int64_t nope_dim = 0;
  std::int64_t emb_dim = 0;
  bool in_place = false;
  bool copy_vector = false;  ///< nope parts and pass-through rows may use 16-byte accesses
  PairRotation rotation;
  PositionArgs positions;
};

/// kv_split: key = [kv[..., :k_dim], rope(k_pe)], value = kv[..., k_dim:].
struct KvSplitKernelArgs {
  ActivationView<const void> kv;
  ActivationView<const void> k_pe;
  ActivationView<void> key;
  ActivationView<void> value;
  std::int64_t heads = 0;
  std::int64_t k_dim = 0;
  std::int64_t v_dim = 0;
  std::int64_t emb_dim = 0;
  bool copy_vector = false;  ///< the k and v parts may use 16-byte accesses
  PairRotation rotation;
  PositionArgs positions;
};

/// kv_split_backward: grad_kv = [grad_key[..., :k], grad_value], grad_k_pe = adjoint(head sum).
struct KvSplitBackwardKernelArgs {
  ActivationView<const void> grad_key;
  ActivationView<const void> grad_value;
  ActivationView<void> grad_kv;
  ActivationView<void> grad_k_pe;
  std::int64_t heads = 0;
  std::int64_t k_dim = 0;
  std::int64_t v_dim = 0;
  std::int64_t emb_dim = 0;
  bool copy_vector = false;
  PairRotation rotation;
  PositionArgs positions;
};

/// yarn_tables: rows are positions offset .. offset + rows - 1.
struct YarnKernelArgs {
  void* cos = nullptr;
  void* sin = nullptr;
  DType dtype = DType::f32;
  std::int64_t rows = 0;
  std::int64_t emb_dim = 0;
  std::int64_t cos_row_stride = 0;
  std::int64_t sin_row_stride = 0;
  std::int64_t offset = 0;
  PairLayout table_layout = PairLayout::half;
  double rotary_base = 10000.0;
  double scaling_factor = 1.0;
  double ramp_low = 0.0;   ///< YaRN correction range, already rounded and clamped
  double ramp_high = 1.0;  ///< > ramp_low
  double concentration = 1.0;
};

}  // namespace mlarope::kernels
