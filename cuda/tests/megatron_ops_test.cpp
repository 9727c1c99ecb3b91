// SPDX-License-Identifier: Apache-2.0
// The Megatron-compatible wrappers: each flag set gives the layout triple of docs/semantics.md §3,
// the wrappers equal the primitives bit for bit, and undefined combinations are errors.
#include <gtest/gtest.h>

#include <vector>

#include "mlarope/error.h"
#include "mlarope/megatron_ops.h"
#include "test_support/backend_test_util.h"

namespace mlarope::test {
namespace {

class MegatronOpsTest : public BackendTest {};

constexpr PairLayout H = PairLayout::half, I = PairLayout::interleaved;

struct Mode {
  const char* name;
  MegatronFlags flags;
  LayoutTriple expected;  // docs/semantics.md §3 table, written out here independently
};

std::vector<Mode> modes() {
  MegatronFlags mla;  // defaults: MLA, mla_rotary_interleaved
  MegatronFlags dsv4 = mla;
  dsv4.mla_output_remove_interleaving = true;
  MegatronFlags neox;
  neox.multi_latent_attention = false;
  neox.mla_rotary_interleaved = false;
  MegatronFlags gptj = neox;
  gptj.rotary_interleaved = true;
  return {{"mla", mla, {I, H, H}},
          {"dsv4", dsv4, {I, I, H}},
          {"neox", neox, {H, H, H}},
          {"gptj", gptj, {I, I, I}}};
}

struct QueryTensors {
  Tensor t, out_a, out_b, cos, sin;
  explicit QueryTensors(BackendKind kind, const std::vector<std::int64_t>& shape, Rng& rng) {
    t = Tensor(DType::bf16, shape);
    out_a = Tensor(DType::bf16, shape);
    out_b = Tensor(DType::bf16, shape);
    t.fill_uniform(rng);
    cos = random_table(DType::f32, 32, 64, rng);
    sin = random_table(DType::f32, 32, 64, rng);
    for (Tensor* x : {&t, &out_a, &out_b, &cos, &sin}) x->upload(kind);
  }
};

RopeArgs primitive_args(const QueryTensors& s, const LayoutTriple& l, Positions p) {
  RopeArgs a;
  a.nope_dim = 128;
  a.emb_dim = 64;
  a.rotation.in_layout = l.in_layout;
  a.rotation.out_layout = l.out_layout;
  a.rotation.table_layout = l.table_layout;
  a.rotation.cos = s.cos.device_view();
  a.rotation.sin = s.sin.device_view();
  a.positions = p;
  return a;
}

TEST_P(MegatronOpsTest, OutOfPlaceAndInPlaceEqualThePrimitivesForEveryMode) {
  for (const Mode& m : modes()) {
    Rng rng(1);
    QueryTensors s(backend(), {4, 2, 3, 192}, rng);
    Stream stream = make_stream();
    MegatronRopeOptions o;
    o.flags = m.flags;
    fused_mla_rope_out_of_place(s.t.device_view(), s.out_a.device_view(), s.cos.device_view(),
                                s.sin.device_view(), 128, 64, o, stream);
    rope({s.t.device_view(), s.out_b.device_view(), primitive_args(s, m.expected, {})}, stream);
    stream.synchronize();
    s.out_a.download();
    s.out_b.download();
    EXPECT_EQ(s.out_a.storage(), s.out_b.storage()) << m.name;
    fused_mla_rope_inplace(s.t.device_view(), s.cos.device_view(), s.sin.device_view(), 128, 64, o,
                           stream);
    stream.synchronize();
    s.t.download();
    EXPECT_EQ(s.t.storage(), s.out_b.storage()) << m.name << " in place";
  }
}

TEST_P(MegatronOpsTest, KvSplitTakesMegatronsHeadlessKPe) {
  Rng rng(2);
  const std::int64_t s = 4, b = 2, heads = 3;
  Tensor kv(DType::bf16, {s, b, heads, 256}), k_pe(DType::bf16, {s, b, 64});
  Tensor key_a(DType::bf16, {s, b, heads, 192}), key_b(DType::bf16, {s, b, heads, 192});
  Tensor value_a(DType::bf16, {s, b, heads, 128}), value_b(DType::bf16, {s, b, heads, 128});
  Tensor cos = random_table(DType::f32, 8, 64, rng), sin = random_table(DType::f32, 8, 64, rng);
  kv.fill_uniform(rng);
  k_pe.fill_uniform(rng);
  for (Tensor* x : {&kv, &k_pe, &key_a, &key_b, &value_a, &value_b, &cos, &sin})
    x->upload(backend());
  Stream stream = make_stream();
  fused_mla_rope_kv_split(kv.device_view(), k_pe.device_view(), key_a.device_view(),
                          value_a.device_view(), cos.device_view(), sin.device_view(), 128, 128, 64,
                          {}, stream);
  ConstTensorView k_pe4 = k_pe.device_view();
  k_pe4.rank = 4;
  k_pe4.shape = {s, b, 1, 64};
  k_pe4.strides = {b * 64, 64, 64, 1};
  KvSplitArgs a;
  a.k_dim = 128;
  a.v_dim = 128;
  a.emb_dim = 64;
  a.rotation.cos = cos.device_view();
  a.rotation.sin = sin.device_view();
  kv_split({kv.device_view(), k_pe4, key_b.device_view(), value_b.device_view(), a}, stream);
  stream.synchronize();
  for (Tensor* x : {&key_a, &key_b, &value_a, &value_b}) x->download();
  EXPECT_EQ(key_a.storage(), key_b.storage());
  EXPECT_EQ(value_a.storage(), value_b.storage());
}

TEST_P(MegatronOpsTest, LegacyQueryCallIsMlaInPlacePerSequence) {
  Rng rng(3);
  QueryTensors s(backend(), {10, 3, 192}, rng);
  IndexArray cu({0, 4, 8});
  cu.upload(backend());
  Stream stream = make_stream();
  Positions p;
  p.layout = TokenLayout::thd;
  p.cu_seqlens = cu.device_view();
  p.cp_size = 2;
  p.cp_rank = 1;
  rope({s.t.device_view(), s.out_b.device_view(), primitive_args(s, {I, H, H}, p)}, stream);
  fused_apply_mla_rope_for_q(s.t.device_view(), s.cos.device_view(), s.sin.device_view(), 128, 64,
                             cu.device_view(), 1, 2, stream);
  stream.synchronize();
  s.t.download();
  s.out_b.download();
  EXPECT_EQ(s.t.storage(), s.out_b.storage());
  EXPECT_THROW(fused_apply_mla_rope_for_q(s.t.device_view(), s.cos.device_view(),
                                          s.sin.device_view(), 128, 64, cu.device_view(), 0, 1,
                                          stream, true),
               Error);
}

TEST_P(MegatronOpsTest, FreqModeFollowsMegatronsGraphSafeRule) {
  Rng rng(4);
  QueryTensors s(backend(), {10, 2, 192}, rng);
  IndexArray cu({0, 4, 10});
  cu.upload(backend());
  Stream stream = make_stream();
  MegatronRopeOptions o;
  o.cu_seqlens = cu.device_view();
  EXPECT_THROW(fused_mla_rope_out_of_place(s.t.device_view(), s.out_a.device_view(),
                                           s.cos.device_view(), s.sin.device_view(), 128, 64, o,
                                           stream),
               Error);
  o.max_seqlen = 6;  // 32 table rows > 6: packed
  fused_mla_rope_out_of_place(s.t.device_view(), s.out_a.device_view(), s.cos.device_view(),
                              s.sin.device_view(), 128, 64, o, stream);
  Positions p;
  p.layout = TokenLayout::thd;
  p.cu_seqlens = cu.device_view();
  p.freq_mode = FreqMode::packed;
  rope({s.t.device_view(), s.out_b.device_view(), primitive_args(s, {I, H, H}, p)}, stream);
  stream.synchronize();
  s.out_a.download();
  s.out_b.download();
  EXPECT_EQ(s.out_a.storage(), s.out_b.storage());
}

TEST_P(MegatronOpsTest, UndefinedFlagCombinationsAreErrors) {
  Rng rng(5);
  QueryTensors s(backend(), {2, 1, 1, 192}, rng);
  Stream stream = make_stream();
  MegatronRopeOptions o;
  o.flags.rotary_interleaved = true;  // together with mla_rotary_interleaved
  EXPECT_THROW(fused_mla_rope_inplace(s.t.device_view(), s.cos.device_view(), s.sin.device_view(),
                                      128, 64, o, stream),
               Error);
  o.flags = {false, false, true, false};  // remove_interleaving without MLA
  EXPECT_THROW(fused_mla_rope_inplace(s.t.device_view(), s.cos.device_view(), s.sin.device_view(),
                                      128, 64, o, stream),
               Error);
}

MLAROPE_INSTANTIATE_BACKENDS(MegatronOpsTest);

}  // namespace
}  // namespace mlarope::test
