// SPDX-License-Identifier: Apache-2.0
// Megatron-compatible wrappers (see include/mlarope/megatron_ops.h).
#include "mlarope/megatron_ops.h"

#include "mlarope/error.h"
#include "mlarope/validate.h"

namespace mlarope {
namespace {

FreqMode freq_mode_of(const MegatronRopeOptions& o, const ConstTensorView& cos) {
  if (o.freq_mode) return *o.freq_mode;
  if (!o.cu_seqlens.present() || o.position_ids.present()) return FreqMode::per_sequence;
  if (o.max_seqlen <= 0)
    throw Error("freq_mode: not given and max_seqlen = 0, so Megatron's graph-safe rule "
                "(packed when the table has more rows than max_seqlen) cannot apply; the "
                "legacy rule needs cu_seqlens[-1] on the host (infer_freq_mode_legacy)");
  return infer_freq_mode(cos.rank >= 1 ? cos.shape[0] : 0, o.max_seqlen);
}

Positions positions_of(const MegatronRopeOptions& o, const ConstTensorView& cos) {
  Positions p;
  p.layout = o.cu_seqlens.present() ? TokenLayout::thd : TokenLayout::sbhd;
  p.cp_size = o.cp_size;
  p.cp_rank = o.cp_rank;
  p.freq_mode = freq_mode_of(o, cos);
  p.max_seqlen = o.max_seqlen;
  p.cu_seqlens = o.cu_seqlens;
  p.position_ids = o.position_ids;
  p.seq_offsets = o.seq_offsets;
  return p;
}

Rotation rotation_of(const MegatronRopeOptions& o, const ConstTensorView& cos,
                     const ConstTensorView& sin) {
  const LayoutTriple l = layouts_from_megatron(o.flags);
  Rotation r;
  r.in_layout = l.in_layout;
  r.out_layout = l.out_layout;
  r.table_layout = l.table_layout;
  r.inverse = o.inverse;
  r.cos = cos;
  r.sin = sin;
  return r;
}

RopeArgs rope_args(const ConstTensorView& cos, const ConstTensorView& sin, std::int64_t nope_dim,
                   std::int64_t emb_dim, const MegatronRopeOptions& o) {
  RopeArgs a;
  a.nope_dim = nope_dim;
  a.emb_dim = emb_dim;
  a.rotation = rotation_of(o, cos, sin);
  a.positions = positions_of(o, cos);
  a.status = o.status;
  return a;
}

// Megatron's k_pe has no head dim: [S, B, emb] / [T, emb]; insert one of size 1.
ConstTensorView with_head_dim(const ConstTensorView& k_pe, int kv_rank) {
  if (k_pe.rank != kv_rank - 1) return k_pe;
  ConstTensorView v = k_pe;
  v.rank = kv_rank;
  v.shape[kv_rank - 1] = k_pe.shape[kv_rank - 2];
  v.strides[kv_rank - 1] = k_pe.strides[kv_rank - 2];
  v.shape[kv_rank - 2] = 1;
  v.strides[kv_rank - 2] = k_pe.shape[kv_rank - 2];
  return v;
}

}  // namespace

void fused_mla_rope_inplace(const TensorView& t, const ConstTensorView& cos,
                            const ConstTensorView& sin, std::int64_t qk_head_dim,
                            std::int64_t emb_dim, const MegatronRopeOptions& options,
                            Stream& stream) {
  rope_inplace({t, rope_args(cos, sin, qk_head_dim, emb_dim, options)}, stream);
}

void fused_mla_rope_out_of_place(const ConstTensorView& t, const TensorView& out,
                                 const ConstTensorView& cos, const ConstTensorView& sin,
                                 std::int64_t qk_head_dim, std::int64_t emb_dim,
                                 const MegatronRopeOptions& options, Stream& stream) {
  rope({t, out, rope_args(cos, sin, qk_head_dim, emb_dim, options)}, stream);
}

void fused_mla_rope_kv_split(const ConstTensorView& kv, const ConstTensorView& k_pe,
                             const TensorView& key, const TensorView& value,
                             const ConstTensorView& cos, const ConstTensorView& sin,
                             std::int64_t k_dim, std::int64_t v_dim, std::int64_t emb_dim,
                             const MegatronRopeOptions& options, Stream& stream) {
  KvSplitArgs a;
  a.k_dim = k_dim;
  a.v_dim = v_dim;
  a.emb_dim = emb_dim;
  a.rotation = rotation_of(options, cos, sin);
  a.positions = positions_of(options, cos);
  a.status = options.status;
  kv_split({kv, with_head_dim(k_pe, kv.rank), key, value, a}, stream);
}

void fused_apply_mla_rope_for_q(const TensorView& t, const ConstTensorView& cos,
                                const ConstTensorView& sin, std::int64_t qk_head_dim,
                                std::int64_t emb_dim, const IndexView& cu_seqlens_q,
                                std::int64_t cp_rank, std::int64_t cp_size, Stream& stream,
                                bool rotary_interleaved) {
  if (rotary_interleaved)
    throw Error("fused_apply_mla_rope_for_q: rotary_interleaved = true is not supported "
                "(Megatron supports only false)");
  MegatronRopeOptions o;  // default flags: MLA, mla_rotary_interleaved
  o.cu_seqlens = cu_seqlens_q;
  o.freq_mode = FreqMode::per_sequence;
  o.cp_rank = cp_rank;
  o.cp_size = cp_size;
  fused_mla_rope_inplace(t, cos, sin, qk_head_dim, emb_dim, o, stream);
}

}  // namespace mlarope
