// SPDX-License-Identifier: Apache-2.0
// One call descriptor per operation of docs/semantics.md §4. Reference, backends, generators and
// case files all speak these structs.
#pragma once

#include <cstdint>

#include "mlarope/status.h"
#include "mlarope/tensor.h"
#include "mlarope/types.h"

namespace mlarope {

/// Which table row each row of a call uses (docs/semantics.md §2).
struct Positions {
  TokenLayout layout = TokenLayout::sbhd;
  std::int64_t cp_size = 1;                     ///< context-parallel ranks
  std::int64_t cp_rank = 0;                     ///< this rank
  FreqMode freq_mode = FreqMode::per_sequence;  ///< THD only
  std::int64_t max_seqlen = 0;  ///< THD: host-known longest global sequence; 0 = not known
  IndexView cu_seqlens;         ///< THD: [N + 1] int32, global (pre-CP) cumulative lengths
  IndexView position_ids;       ///< THD, optional: [T] int32/int64, table row of each row
  IndexView seq_offsets;        ///< optional: [B] (SBHD) or [N] (THD) int32, added to positions
};

/// The rotation of each rope slice (docs/semantics.md §3): the layout triple, `inverse` and the
/// tables.
struct Rotation {
  PairLayout in_layout = PairLayout::interleaved;
  PairLayout out_layout = PairLayout::half;
  PairLayout table_layout = PairLayout::half;
  bool inverse = false;  ///< negates sin
  ConstTensorView cos;   ///< [R, emb_dim] or [R, 1, 1, emb_dim]
  ConstTensorView sin;   ///< same shape and dtype as cos
};

/// What every rope-family call shares.
struct RopeArgs {
  std::int64_t nope_dim = 0;  ///< leading elements of each head that pass through
  std::int64_t emb_dim = 0;   ///< trailing elements that are rotated (the rope slice)
  Rotation rotation;
  Positions positions;
  DeviceStatus* status = nullptr;  ///< optional device word: OR of StatusBit for bad metadata
};

/// rope(t) -> out, out of place: never writes t.
struct RopeCall {
  ConstTensorView t;  ///< SBHD [S, B, H, nope+emb] or THD [T, H, nope+emb]
  TensorView out;     ///< same shape and dtype as t; must not overlap any input
  RopeArgs args;
};

/// rope_inplace(t): writes only the rope slices of t.
struct RopeInplaceCall {
  TensorView t;
  RopeArgs args;
};

/// rope_backward(grad_out) -> grad_t, the adjoint of rope; never writes grad_out.
struct RopeBackwardCall {
  ConstTensorView grad_out;
  TensorView grad_t;
  RopeArgs args;
};

/// rope_backward in place: grad holds grad_out on entry and grad_t on return.
struct RopeBackwardInplaceCall {
  TensorView grad;
  RopeArgs args;
};

/// What both kv_split calls share.
struct KvSplitArgs {
  std::int64_t k_dim = 0;    ///< leading elements of each kv head that become the key
  std::int64_t v_dim = 0;    ///< trailing elements of each kv head that become the value
  std::int64_t emb_dim = 0;  ///< rope slice of k_pe, appended to every key head
  Rotation rotation;
  Positions positions;
  DeviceStatus* status = nullptr;
};

/// kv_split(kv, k_pe) -> key = [kv[..., :k_dim], rope(k_pe)], value = kv[..., k_dim:].
struct KvSplitCall {
  ConstTensorView kv;    ///< SBHD [S, B, H, k+v] or THD [T, H, k+v]
  ConstTensorView k_pe;  ///< SBHD [S, B, 1, emb] or THD [T, 1, emb]
  TensorView key;        ///< [..., H, k + emb]
  TensorView value;      ///< [..., H, v]
  KvSplitArgs args;
};

/// kv_split_backward(grad_key, grad_value) -> grad_kv, grad_k_pe.
struct KvSplitBackwardCall {
  ConstTensorView grad_key;    ///< [..., H, k + emb]
  ConstTensorView grad_value;  ///< [..., H, v]
  TensorView grad_kv;          ///< [..., H, k + v]
  TensorView grad_k_pe;        ///< [..., 1, emb]: adjoint rotation of the sum over heads
  KvSplitArgs args;
};

/// YaRN parameters, named as in Megatron's YarnRotaryEmbedding. Plain RoPE: scaling_factor 1.
struct YarnParams {
  double rotary_base = 10000.0;
  double scaling_factor = 1.0;
  double original_max_position_embeddings = 4096.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
  /// Factor the tables are multiplied by; NaN (the default) means Megatron's
  /// mscale(scaling_factor, mscale) / mscale(scaling_factor, mscale_all_dim).
  double concentration_override = __builtin_nan("");
};

/// yarn_tables(...) -> cos, sin: rows are positions offset .. offset + R - 1.
struct YarnTablesCall {
  YarnParams params;
  std::int64_t offset = 0;
  PairLayout table_layout = PairLayout::half;  ///< half: [f, f]; interleaved: each angle twice
  TensorView cos;                              ///< [R, emb_dim] or [R, 1, 1, emb_dim]
  TensorView sin;                              ///< same shape and dtype as cos
};

}  // namespace mlarope
