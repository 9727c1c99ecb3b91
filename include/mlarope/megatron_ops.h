// SPDX-License-Identifier: Apache-2.0
// Megatron-LM compatible entry points: its fused MLA RoPE calls, with its flag names, mapped
// onto the primitives of backend.h (layouts_from_megatron picks the layout triple; a flag
// combination Megatron does not define is an error, never silently dropped).
#pragma once

#include <cstdint>
#include <optional>

#include "mlarope/backend.h"
#include "mlarope/megatron.h"

namespace mlarope {

/// What Megatron's fused MLA RoPE calls take besides tensors and dims (Megatron's names).
struct MegatronRopeOptions {
  MegatronFlags flags;                ///< the mode (docs/semantics.md §3 table)
  IndexView cu_seqlens;               ///< given: THD tensors [T, H, D]; absent: SBHD [S, B, H, D]
  std::int64_t max_seqlen = 0;        ///< THD: host-known longest global sequence; 0 = unknown
  std::optional<FreqMode> freq_mode;  ///< THD: explicit, else Megatron's graph-safe rule
                                      ///< (packed when the table has more rows than max_seqlen)
  std::int64_t cp_size = 1;
  std::int64_t cp_rank = 0;
  IndexView position_ids;  ///< THD, optional: table row of each row
  IndexView seq_offsets;   ///< optional: added to every position of a batch entry / sequence
  bool inverse = false;    ///< negate sin
  DeviceStatus* status = nullptr;  ///< optional device status word (docs/semantics.md §5)
};

/// fused_mla_rope_inplace: rotate the rope slices of t ([..., H, qk_head_dim + emb_dim]) in place.
void fused_mla_rope_inplace(const TensorView& t, const ConstTensorView& cos,
                            const ConstTensorView& sin, std::int64_t qk_head_dim,
                            std::int64_t emb_dim, const MegatronRopeOptions& options,
                            Stream& stream);

/// fused_mla_rope_out_of_place: out = t with its rope slices rotated; t is not written.
void fused_mla_rope_out_of_place(const ConstTensorView& t, const TensorView& out,
                                 const ConstTensorView& cos, const ConstTensorView& sin,
                                 std::int64_t qk_head_dim, std::int64_t emb_dim,
                                 const MegatronRopeOptions& options, Stream& stream);

/// fused_mla_rope_kv_split: key = [kv[..., :k_dim], rope(k_pe)], value = kv[..., k_dim:].
/// k_pe may be Megatron's [S, B, emb_dim] / [T, emb_dim] or [S, B, 1, emb_dim] / [T, 1, emb_dim].
void fused_mla_rope_kv_split(const ConstTensorView& kv, const ConstTensorView& k_pe,
                             const TensorView& key, const TensorView& value,
                             const ConstTensorView& cos, const ConstTensorView& sin,
                             std::int64_t k_dim, std::int64_t v_dim, std::int64_t emb_dim,
                             const MegatronRopeOptions& options, Stream& stream);

/// The legacy fused_apply_mla_rope_for_q: in place, MLA mode (interleaved in, half out, half
/// table), per-sequence positions; THD when cu_seqlens_q is given. Like Megatron, only
/// rotary_interleaved = false is supported (true throws mlarope::Error).
void fused_apply_mla_rope_for_q(const TensorView& t, const ConstTensorView& cos,
                                const ConstTensorView& sin, std::int64_t qk_head_dim,
                                std::int64_t emb_dim, const IndexView& cu_seqlens_q,
                                std::int64_t cp_rank, std::int64_t cp_size, Stream& stream,
                                bool rotary_interleaved = false);

}  // namespace mlarope
