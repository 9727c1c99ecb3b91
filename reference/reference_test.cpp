// SPDX-License-Identifier: Apache-2.0
// The reference of docs/semantics.md §3-§4: hand-computed rotations, pass-through, views, and the
// algebraic identities (round trip, adjoint, in place == out of place, round once).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <ios>
#include <vector>

#include "mlarope/error.h"
#include "mlarope/megatron.h"
#include "reference.h"
#include "test_util.h"

namespace mlarope {
namespace {

using test::HostTensor;
using test::Rng;
using test::Table;

constexpr PairLayout kHalf = PairLayout::half;
constexpr PairLayout kInter = PairLayout::interleaved;

const LayoutTriple kMla{kInter, kHalf, kHalf};
const LayoutTriple kMlaRemoveInterleaving{kInter, kInter, kHalf};
const LayoutTriple kNeox{kHalf, kHalf, kHalf};
const LayoutTriple kGptj{kInter, kInter, kInter};

// One head [nope | rope slice] through rope or rope_backward with a one-row f32 table.
std::vector<double> one_head(const LayoutTriple& l, bool inverse, const std::vector<double>& c,
                             const std::vector<double>& s, const std::vector<double>& head,
                             std::int64_t nope_dim, bool backward = false) {
  const std::int64_t d = static_cast<std::int64_t>(c.size());
  const std::int64_t width = static_cast<std::int64_t>(head.size());
  const Table table = test::constant_table(DType::f32, 1, c, s);
  HostTensor t(DType::f32, {1, 1, 1, width});
  for (std::int64_t k = 0; k < width; ++k) t.set({0, 0, 0, k}, head[k]);
  const RopeArgs args =
      test::rope_args(nope_dim, d, test::make_rotation(l, inverse, table), test::sbhd_positions());
  const HostTensor out = backward ? test::run_rope_backward(t, args) : test::run_rope(t, args);
  return test::last_dim_values(out, {0, 0, 0}, 0, width);
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& expected,
                     double tolerance) {
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t k = 0; k < got.size(); ++k)
    EXPECT_NEAR(got[k], expected[k], tolerance) << "element " << k;
}

// --- Hand-computed rotations -------------------------------------------------------------------

// x = nope [7, -3] | slice [1, 2, 3, 4]; every pair rotated by cos 0.6, sin 0.8.
TEST(HandComputedRotation, MegatronModesRotateByTheAngleOfTheTable) {
  const std::vector<double> c(4, 0.6), s(4, 0.8), head{7, -3, 1, 2, 3, 4};
  struct Case {
    const char* name;
    LayoutTriple layouts;
    bool inverse;
    std::vector<double> expected;
  };
  const std::vector<Case> cases{
      // MLA: pairs (x0, x1), (x2, x3) read interleaved, written as (y0, y2), (y1, y3).
      {"MLA", kMla, false, {7, -3, -1.0, -1.4, 2.0, 4.8}},
      {"MLA + remove interleaving", kMlaRemoveInterleaving, false, {7, -3, -1.0, 2.0, -1.4, 4.8}},
      // NeoX: pairs (x0, x2), (x1, x3).
      {"NeoX", kNeox, false, {7, -3, -1.8, -2.0, 2.6, 4.0}},
      {"GPT-J", kGptj, false, {7, -3, -1.0, 2.0, -1.4, 4.8}},
      // inverse: y_u = u c + v s, y_v = v c - u s.
      {"MLA inverse", kMla, true, {7, -3, 2.2, 5.0, 0.4, 0.0}},
      {"MLA + remove interleaving inverse",
       kMlaRemoveInterleaving,
       true,
       {7, -3, 2.2, 0.4, 5.0, 0.0}},
      {"NeoX inverse", kNeox, true, {7, -3, 3.0, 4.4, 1.0, 0.8}},
      {"GPT-J inverse", kGptj, true, {7, -3, 2.2, 0.4, 5.0, 0.0}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    expect_near_all(one_head(k.layouts, k.inverse, c, s, head, 2), k.expected, 1e-6);
  }
}

// A table with eight different (integer, exact) entries shows which entries each pair reads:
// c = [1, 2, 3, 4], s = [5, 6, 7, 8], x = [1, 2, 3, 4]. All results are exact.
TEST(HandComputedRotation, TableLayoutPicksTheEntriesOfEachPair) {
  const std::vector<double> c{1, 2, 3, 4}, s{5, 6, 7, 8}, head{1, 2, 3, 4};
  struct Case {
    const char* name;
    LayoutTriple layouts;
    bool inverse;
    std::vector<double> expected;
  };
  const std::vector<Case> cases{
      // MLA pair 0: u = 1, v = 2, (tu, tv) = (0, 2): y0 = 1*1 - 2*5, y2 = 2*3 + 1*7.
      //     pair 1: u = 3, v = 4, (tu, tv) = (1, 3): y1 = 3*2 - 4*6, y3 = 4*4 + 3*8.
      {"MLA", kMla, false, {-9, -18, 13, 40}},
      {"MLA + remove interleaving", kMlaRemoveInterleaving, false, {-9, 13, -18, 40}},
      // NeoX pair 0: u = 1, v = 3: y0 = 1 - 15, y2 = 9 + 7; pair 1: u = 2, v = 4: y1 = 4 - 24, y3 =
      // 16 + 16.
      {"NeoX", kNeox, false, {-14, -20, 16, 32}},
      // GPT-J pair 0: (tu, tv) = (0, 1): y0 = 1 - 10, y1 = 4 + 6; pair 1: (2, 3): y2 = 9 - 28, y3 =
      // 16 + 24.
      {"GPT-J", kGptj, false, {-9, 10, -19, 40}},
      // in half, out interleaved, table interleaved: not a Megatron mode, but a point of the space.
      {"half/interleaved/interleaved", {kHalf, kInter, kInter}, false, {-14, 12, -22, 32}},
      {"MLA inverse", kMla, true, {11, 30, -1, -8}},
      {"NeoX inverse", kNeox, true, {16, 28, 2, 0}},
      {"GPT-J inverse", kGptj, true, {11, -2, 37, -8}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    EXPECT_EQ(one_head(k.layouts, k.inverse, c, s, head, 0), k.expected);
  }
}

// grad_t[iu] = gu c[tu] + gv sg s[tv], grad_t[iv] = -gu sg s[tu] + gv c[tv].
TEST(HandComputedRotation, BackwardIsTheTransposeOfTheForwardRotation) {
  const std::vector<double> c{1, 2, 3, 4}, s{5, 6, 7, 8}, grad_out{9, 1, 2, 3, 4};
  // MLA pair 0: (gu, gv) = (g0, g2) = (1, 3): grad_t0 = 1*1 + 3*7, grad_t1 = -1*5 + 3*3.
  //     pair 1: (g1, g3) = (2, 4):           grad_t2 = 2*2 + 4*8, grad_t3 = -2*6 + 4*4.
  EXPECT_EQ(one_head(kMla, false, c, s, grad_out, 1, true), (std::vector<double>{9, 22, 4, 36, 4}));
  EXPECT_EQ(one_head(kMla, true, c, s, grad_out, 1, true),
            (std::vector<double>{9, -20, 14, -28, 28}));
  EXPECT_EQ(one_head(kGptj, false, c, s, grad_out, 1, true),
            (std::vector<double>{9, 13, -1, 41, -5}));
  // The transpose of an arbitrary (non-unit) table is not its inverse.
  EXPECT_NE(one_head(kMla, false, c, s, grad_out, 1, true),
            one_head(kMla, true, c, s, grad_out, 1));
}

TEST(HandComputedRotation, KvSplitCopiesKvAndRotatesKPeIntoEveryHead) {
  const Table table = test::constant_table(DType::f32, 1, {1, 2, 3, 4}, {5, 6, 7, 8});
  const std::int64_t heads = 2, k_dim = 2, v_dim = 3, d = 4;
  HostTensor kv(DType::f32, {1, 1, heads, k_dim + v_dim}), k_pe(DType::f32, {1, 1, 1, d});
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t k = 0; k < k_dim + v_dim; ++k) kv.set({0, 0, h, k}, 10.0 * h + k + 1);
  for (std::int64_t k = 0; k < d; ++k) k_pe.set({0, 0, 0, k}, k + 1.0);
  HostTensor key(DType::f32, {1, 1, heads, k_dim + d}), value(DType::f32, {1, 1, heads, v_dim});
  const KvSplitArgs args = test::kv_args(k_dim, v_dim, d, test::make_rotation(kMla, false, table),
                                         test::sbhd_positions());
  reference::kv_split({kv.cview(), k_pe.cview(), key.view(), value.view(), args});
  for (std::int64_t h = 0; h < heads; ++h) {
    const double b = 10.0 * h;
    EXPECT_EQ(test::last_dim_values(key, {0, 0, h}, 0, k_dim + d),
              (std::vector<double>{b + 1, b + 2, -9, -18, 13, 40}));
    EXPECT_EQ(test::last_dim_values(value, {0, 0, h}, 0, v_dim),
              (std::vector<double>{b + 3, b + 4, b + 5}));
  }

  // Backward: grad_kv = [grad_key[:k_dim], grad_value]; grad_k_pe = adjoint of the head sum.
  HostTensor grad_key(DType::f32, {1, 1, heads, k_dim + d}),
      grad_value(DType::f32, {1, 1, heads, v_dim});
  const std::vector<std::vector<double>> slices{{1, 2, 3, 4}, {0, 1, 0, 1}};  // sum [1, 3, 3, 5]
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t k = 0; k < k_dim; ++k) grad_key.set({0, 0, h, k}, -(10.0 * h + k));
    for (std::int64_t k = 0; k < d; ++k) grad_key.set({0, 0, h, k_dim + k}, slices[h][k]);
    for (std::int64_t k = 0; k < v_dim; ++k) grad_value.set({0, 0, h, k}, 100.0 * h + k);
  }
  HostTensor grad_kv(DType::f32, {1, 1, heads, k_dim + v_dim}), grad_k_pe(DType::f32, {1, 1, 1, d});
  reference::kv_split_backward(
      {grad_key.cview(), grad_value.cview(), grad_kv.view(), grad_k_pe.view(), args});
  for (std::int64_t h = 0; h < heads; ++h)
    EXPECT_EQ(test::last_dim_values(grad_kv, {0, 0, h}, 0, k_dim + v_dim),
              (std::vector<double>{-10.0 * h, -10.0 * h - 1, 100.0 * h, 100.0 * h + 1,
                                   100.0 * h + 2}));
  // MLA adjoint of [1, 3, 3, 5]: pair 0 (1, 3) -> 1 + 21, -5 + 9; pair 1 (3, 5) -> 6 + 40, -18
  // + 20.
  EXPECT_EQ(test::last_dim_values(grad_k_pe, {0, 0, 0}, 0, d), (std::vector<double>{22, 4, 46, 2}));
}

// --- Megatron flags ------------------------------------------------------------------------------

bool same_triple(const LayoutTriple& a, const LayoutTriple& b) {
  return a.in_layout == b.in_layout && a.out_layout == b.out_layout &&
         a.table_layout == b.table_layout;
}

TEST(MegatronFlags, MapOntoTheLayoutTriplesOfTheSpecTable) {
  MegatronFlags f;  // MLA, mla_rotary_interleaved
  EXPECT_TRUE(same_triple(layouts_from_megatron(f), kMla))
      << test::describe(layouts_from_megatron(f));
  f.mla_output_remove_interleaving = true;
  EXPECT_TRUE(same_triple(layouts_from_megatron(f), kMlaRemoveInterleaving));
  f = MegatronFlags{};
  f.multi_latent_attention = false;
  f.mla_rotary_interleaved = false;
  EXPECT_TRUE(same_triple(layouts_from_megatron(f), kNeox));
  f.rotary_interleaved = true;
  EXPECT_TRUE(same_triple(layouts_from_megatron(f), kGptj));
  // MLA with a non-interleaved rope slice is the standard rotation.
  f = MegatronFlags{};
  f.mla_rotary_interleaved = false;
  EXPECT_TRUE(same_triple(layouts_from_megatron(f), kNeox));
  // mla_rotary_interleaved only means something on the MLA path.
  f = MegatronFlags{};
  f.multi_latent_attention = false;
  EXPECT_TRUE(same_triple(layouts_from_megatron(f), kNeox));
}

void expect_flags_rejected(const MegatronFlags& f, const std::string& needle) {
  try {
    layouts_from_megatron(f);
    ADD_FAILURE() << "no error; expected one naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(MegatronFlags, ContradictoryFlagsAreRejected) {
  MegatronFlags f;
  f.rotary_interleaved = true;  // with MLA's interleaved slice
  expect_flags_rejected(f, "rotary_interleaved");
  f = MegatronFlags{};
  f.multi_latent_attention = false;
  f.mla_output_remove_interleaving = true;
  expect_flags_rejected(f, "mla_output_remove_interleaving");
  f = MegatronFlags{};
  f.mla_rotary_interleaved = false;
  f.mla_output_remove_interleaving = true;
  expect_flags_rejected(f, "mla_output_remove_interleaving");
}

TEST(MegatronFlags, FreqModeInferenceRules) {
  EXPECT_EQ(infer_freq_mode(9, 8), FreqMode::packed);
  EXPECT_EQ(infer_freq_mode(8, 8), FreqMode::per_sequence);
  EXPECT_EQ(infer_freq_mode(4, 8), FreqMode::per_sequence);
  EXPECT_EQ(infer_freq_mode_legacy(16, 16), FreqMode::packed);
  EXPECT_EQ(infer_freq_mode_legacy(8, 16), FreqMode::per_sequence);
}

TEST(MegatronFlags, DefaultFlagsGiveTheHandComputedMlaRotation) {
  const LayoutTriple l = layouts_from_megatron(MegatronFlags{});
  EXPECT_EQ(one_head(l, false, {1, 2, 3, 4}, {5, 6, 7, 8}, {1, 2, 3, 4}, 0),
            (std::vector<double>{-9, -18, 13, 40}));
}

// --- Pass-through --------------------------------------------------------------------------------

constexpr std::int64_t kNope = 3, kEmb = 8, kWidth = kNope + kEmb;

// A THD problem: cu_seqlens [0, 2, 5] over T = 7 rows (rows 5, 6 are padding), H = 2.
struct PaddedThd {
  std::vector<std::int32_t> cu{0, 2, 5};
  Table table;
  HostTensor t;
  RopeArgs args;
  explicit PaddedThd(DType dtype, const LayoutTriple& l = kMla, std::uint64_t seed = 1) {
    Rng rng(seed);
    table = test::random_unit_table(DType::f32, 8, kEmb, l.table_layout, rng);
    t = HostTensor(dtype, {7, 2, kWidth});
    test::fill_uniform(t, rng);
    args = test::rope_args(kNope, kEmb, test::make_rotation(l, false, table),
                           test::thd_positions(cu, FreqMode::per_sequence, 1, 0, 3));
  }
};

TEST(PassThrough, PaddingRowsAreCopiedOutOfPlaceAndUntouchedInPlace) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(test::dtype_name(dtype));
    PaddedThd p(dtype);
    // Odd bit patterns in a padding row must survive: a NaN payload, -0, a subnormal.
    p.t.set_bits({5, 0, kNope}, dtype == DType::f32 ? 0x7FA00001u : 0x7D01u);
    p.t.set_bits({5, 1, kWidth - 1}, dtype == DType::f32 ? 0x80000000u : 0x8000u);
    p.t.set_bits({6, 1, kNope + 1}, 0x0001u);
    const HostTensor out = test::run_rope(p.t, p.args);
    const HostTensor in_place = test::run_rope_inplace(p.t, p.args);
    for (std::int64_t row = 0; row < 7; ++row)
      for (std::int64_t h = 0; h < 2; ++h)
        for (std::int64_t k = 0; k < kWidth; ++k) {
          if (row >= 5 || k < kNope) {
            EXPECT_EQ(out.bits({row, h, k}), p.t.bits({row, h, k})) << row << " " << h << " " << k;
            EXPECT_EQ(in_place.bits({row, h, k}), p.t.bits({row, h, k}));
          }
        }
    // Sequence rows are rotated: a rope slice differs from the input somewhere.
    EXPECT_NE(test::last_dim_values(out, {1, 0}, kNope, kEmb),
              test::last_dim_values(p.t, {1, 0}, kNope, kEmb));
    EXPECT_TRUE(test::same_bits(out, in_place));
  }
}

// Bit patterns that a value-level copy (through float or double) could alter.
std::vector<std::uint32_t> odd_patterns(DType dtype) {
  if (dtype == DType::f32)
    return {0x7FA00001u, 0xFFC12345u, 0x80000000u, 0x00000001u, 0x7F800000u, 0xFF800000u};
  if (dtype == DType::f16) return {0x7C01u, 0xFE01u, 0x8000u, 0x0001u, 0x7C00u, 0x7D55u};
  return {0x7F81u, 0xFFC1u, 0x8000u, 0x0001u, 0x7F80u, 0x7FD5u};  // bf16
}

TEST(PassThrough, NopePartIsCopiedBitwise) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (const LayoutTriple& l : {kMla, kNeox}) {
      SCOPED_TRACE(std::string(test::dtype_name(dtype)) + " " + test::describe(l));
      Rng rng(7);
      const Table table = test::random_unit_table(DType::bf16, 4, kEmb, l.table_layout, rng);
      HostTensor t(dtype, {4, 2, 3, kWidth});
      test::fill_uniform(t, rng);
      const std::vector<std::uint32_t> patterns = odd_patterns(dtype);
      std::size_t next = 0;
      t.for_each_index([&](const std::vector<std::int64_t>& i) {
        if (i[3] < kNope) t.set_bits(i, patterns[next++ % patterns.size()]);
      });
      const RopeArgs args = test::rope_args(kNope, kEmb, test::make_rotation(l, false, table),
                                            test::sbhd_positions());
      for (const HostTensor& result :
           {test::run_rope(t, args), test::run_rope_inplace(t, args),
            test::run_rope_backward(t, args), test::run_rope_backward_inplace(t, args)})
        t.for_each_index([&](const std::vector<std::int64_t>& i) {
          if (i[3] < kNope) {
            ASSERT_EQ(result.bits(i), t.bits(i));
          }
        });
    }
}

TEST(PassThrough, KvSplitCopiesKeyAndValuePartsBitwise) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(test::dtype_name(dtype));
    Rng rng(11);
    const std::int64_t k_dim = 5, v_dim = 3, heads = 3;
    const Table table = test::random_unit_table(DType::f32, 4, kEmb, kHalf, rng);
    HostTensor kv(dtype, {4, 2, heads, k_dim + v_dim}), k_pe(dtype, {4, 2, 1, kEmb});
    const std::vector<std::uint32_t> patterns = odd_patterns(dtype);
    std::size_t next = 0;
    kv.for_each_index([&](const std::vector<std::int64_t>& i) {
      kv.set_bits(i, patterns[next++ % patterns.size()]);
    });
    test::fill_uniform(k_pe, rng);
    HostTensor key(dtype, {4, 2, heads, k_dim + kEmb}), value(dtype, {4, 2, heads, v_dim});
    const KvSplitArgs args =
        test::kv_args(k_dim, v_dim, kEmb, test::make_rotation(kMla, false, table),
                      test::sbhd_positions());
    reference::kv_split({kv.cview(), k_pe.cview(), key.view(), value.view(), args});
    kv.for_each_index([&](const std::vector<std::int64_t>& i) {
      if (i[3] < k_dim) {
        ASSERT_EQ(key.bits(i), kv.bits(i));
      } else {
        ASSERT_EQ(value.bits({i[0], i[1], i[2], i[3] - k_dim}), kv.bits(i));
      }
    });
    // And backward copies grad_key[:k_dim] and grad_value the same way.
    HostTensor grad_kv(dtype, {4, 2, heads, k_dim + v_dim}), grad_k_pe(dtype, {4, 2, 1, kEmb});
    reference::kv_split_backward(
        {key.cview(), value.cview(), grad_kv.view(), grad_k_pe.view(), args});
    EXPECT_TRUE(test::same_bits(grad_kv, kv));
  }
}

// A strided [S, B, H, D] view: head stride D + 3, batch stride with a gap of 5, guards of 9.
HostTensor strided_sbhd(DType dtype, std::int64_t s, std::int64_t b, std::int64_t h,
                        std::int64_t d) {
  const std::int64_t head_stride = d + 3, batch_stride = h * head_stride + 5;
  return HostTensor(dtype, {s, b, h, d}, {b * batch_stride + 2, batch_stride, head_stride, 1}, 9);
}

void copy_values(const HostTensor& from, HostTensor& to) {
  from.for_each_index([&](const std::vector<std::int64_t>& i) { to.set_bits(i, from.bits(i)); });
}

TEST(PassThrough, InPlaceWritesOnlyTheRopeSlices) {
  for (DType dtype : {DType::f32, DType::bf16})
    for (const LayoutTriple& l : test::all_triples()) {
      SCOPED_TRACE(std::string(test::dtype_name(dtype)) + " " + test::describe(l));
      Rng rng(3);
      const Table table = test::random_table(DType::f32, 5, kEmb, rng);
      HostTensor t = strided_sbhd(dtype, 5, 2, 3, kWidth);
      t.fill_bits(0x7FC0A5A5u);  // gaps and guards: a NaN pattern
      test::fill_uniform(t, rng);
      const RopeArgs args = test::rope_args(kNope, kEmb, test::make_rotation(l, false, table),
                                            test::sbhd_positions());
      for (bool backward : {false, true}) {
        HostTensor result = t;
        if (backward) reference::rope_backward_inplace({result.view(), args});
        else reference::rope_inplace({result.view(), args});
        // Expected storage: the input's, with only the rope slices replaced.
        HostTensor expected = t;
        t.for_each_index([&](const std::vector<std::int64_t>& i) {
          if (i[3] >= kNope) expected.set_bits(i, result.bits(i));
        });
        EXPECT_TRUE(test::same_storage(result, expected));
      }
    }
}

TEST(PassThrough, OutOfPlaceWritesNothingOutsideTheOutputView) {
  Rng rng(4);
  const Table table = test::random_unit_table(DType::f32, 5, kEmb, kHalf, rng);
  HostTensor t(DType::f32, {5, 2, 3, kWidth});
  test::fill_uniform(t, rng);
  const HostTensor t_before = t;
  HostTensor out = strided_sbhd(DType::f32, 5, 2, 3, kWidth);
  out.fill_bits(0xDEADBEEFu);
  const HostTensor out_before = out;
  const RopeArgs args =
      test::rope_args(kNope, kEmb, test::make_rotation(kMla, false, table), test::sbhd_positions());
  reference::rope({t.cview(), out.view(), args});
  EXPECT_TRUE(test::same_storage(t, t_before)) << "out of place wrote its input";
  HostTensor expected = out_before;
  copy_values(out, expected);  // every view element written ...
  EXPECT_TRUE(test::same_storage(out, expected)) << "... and nothing else";
  out.for_each_index(
      [&](const std::vector<std::int64_t>& i) { ASSERT_NE(out.bits(i), 0xDEADBEEFu); });
}

TEST(StridedViews, GiveTheSameValuesAsContiguousTensors) {
  for (DType dtype : {DType::f32, DType::f16})
    for (const LayoutTriple& l : {kMla, kGptj, LayoutTriple{kHalf, kInter, kHalf}}) {
      SCOPED_TRACE(std::string(test::dtype_name(dtype)) + " " + test::describe(l));
      Rng rng(5);
      const std::int64_t s = 6, b = 2, h = 3;
      Table table = test::random_table(DType::f32, 12, kEmb, rng);
      HostTensor t(dtype, {s, b, h, kWidth});
      test::fill_uniform(t, rng);
      const RopeArgs args = test::rope_args(kNope, kEmb, test::make_rotation(l, false, table),
                                            test::sbhd_positions(2, 1));
      const HostTensor expected = test::run_rope(t, args);
      const HostTensor expected_backward = test::run_rope_backward(t, args);

      // Table as [R, 1, 1, d] with a row stride larger than d.
      Table strided_table{HostTensor(DType::f32, {12, 1, 1, kEmb},
                                     {kEmb + 4, kEmb + 4, kEmb + 4, 1}, 3),
                          HostTensor(DType::f32, {12, 1, 1, kEmb}, {kEmb + 1, 1, 1, 1}, 2)};
      for (std::int64_t r = 0; r < 12; ++r)
        for (std::int64_t k = 0; k < kEmb; ++k) {
          strided_table.cos.set_bits({r, 0, 0, k}, table.cos.bits({r, k}));
          strided_table.sin.set_bits({r, 0, 0, k}, table.sin.bits({r, k}));
        }
      RopeArgs strided_args = args;
      strided_args.rotation = test::make_rotation(l, false, strided_table);

      HostTensor t_strided = strided_sbhd(dtype, s, b, h, kWidth);
      copy_values(t, t_strided);
      HostTensor out_strided = strided_sbhd(dtype, s, b, h, kWidth);
      reference::rope({t_strided.cview(), out_strided.view(), strided_args});
      EXPECT_TRUE(test::same_bits(out_strided, expected));
      reference::rope_backward({t_strided.cview(), out_strided.view(), strided_args});
      EXPECT_TRUE(test::same_bits(out_strided, expected_backward));
      reference::rope_inplace({t_strided.view(), strided_args});
      EXPECT_TRUE(test::same_bits(t_strided, expected));
    }
}

TEST(StridedViews, BroadcastInputWithHeadStrideZeroEqualsTheMaterializedTensor) {
  Rng rng(6);
  const Table table = test::random_unit_table(DType::f32, 4, kEmb, kHalf, rng);
  // One head's storage per row, seen as H = 4 heads (an expanded gradient).
  HostTensor broadcast(DType::bf16, {4, 4, kWidth}, {kWidth, 0, 1});
  test::fill_uniform(broadcast, rng);
  HostTensor materialized(DType::bf16, {4, 4, kWidth});
  copy_values(broadcast, materialized);
  const std::vector<std::int32_t> cu{0, 4};
  const RopeArgs args = test::rope_args(kNope, kEmb, test::make_rotation(kMla, false, table),
                                        test::thd_positions(cu));
  EXPECT_TRUE(test::same_bits(test::run_rope(broadcast, args), test::run_rope(materialized, args)));
  EXPECT_TRUE(test::same_bits(test::run_rope_backward(broadcast, args),
                              test::run_rope_backward(materialized, args)));
}

TEST(StridedViews, ThdRowStrideWithGapsEqualsContiguous) {
  Rng rng(8);
  const Table table = test::random_table(DType::f32, 8, kEmb, rng);
  const std::vector<std::int32_t> cu{0, 3, 8};
  HostTensor t(DType::f32, {8, 2, kWidth});
  test::fill_uniform(t, rng);
  HostTensor t_strided(DType::f32, {8, 2, kWidth}, {2 * kWidth + 7, kWidth + 1, 1}, 4);
  copy_values(t, t_strided);
  HostTensor out_strided(DType::f32, {8, 2, kWidth}, {3 * kWidth, kWidth + 2, 1}, 4);
  const RopeArgs args = test::rope_args(kNope, kEmb, test::make_rotation(kNeox, true, table),
                                        test::thd_positions(cu, FreqMode::packed));
  reference::rope({t_strided.cview(), out_strided.view(), args});
  EXPECT_TRUE(test::same_bits(out_strided, test::run_rope(t, args)));
}

TEST(ZeroSize, EmptyTensorsAreValidNoOps) {
  Rng rng(9);
  const Table table = test::random_unit_table(DType::f32, 4, kEmb, kHalf, rng);
  const Rotation rotation = test::make_rotation(kMla, false, table);
  const std::vector<std::int32_t> cu_empty{0}, cu_zero{0, 0};
  DeviceStatus status = kStatusOk;
  // T = 0 with null data.
  for (const std::vector<std::int32_t>* cu : {&cu_empty, &cu_zero}) {
    const RopeArgs args = test::rope_args(kNope, kEmb, rotation, test::thd_positions(*cu), &status);
    TensorView empty = contiguous_view<void>(nullptr, DType::f32, {0, 4, kWidth});
    EXPECT_NO_THROW(reference::rope({empty, empty, args}));
    EXPECT_NO_THROW(reference::rope_inplace({empty, args}));
    EXPECT_NO_THROW(reference::rope_backward({empty, empty, args}));
    EXPECT_NO_THROW(reference::rope_backward_inplace({empty, args}));
    const KvSplitArgs kv = test::kv_args(2, 3, kEmb, rotation, test::thd_positions(*cu), &status);
    TensorView kv_view = contiguous_view<void>(nullptr, DType::f32, {0, 4, 5});
    TensorView k_pe = contiguous_view<void>(nullptr, DType::f32, {0, 1, kEmb});
    TensorView key = contiguous_view<void>(nullptr, DType::f32, {0, 4, 2 + kEmb});
    TensorView value = contiguous_view<void>(nullptr, DType::f32, {0, 4, 3});
    EXPECT_NO_THROW(reference::kv_split({kv_view, k_pe, key, value, kv}));
    EXPECT_NO_THROW(reference::kv_split_backward({key, value, kv_view, k_pe, kv}));
  }
  // H = 0 (SBHD and THD), B = 0, S = 0.
  for (const std::vector<std::int64_t>& shape :
       {std::vector<std::int64_t>{4, 2, 0, kWidth}, std::vector<std::int64_t>{4, 0, 3, kWidth},
        std::vector<std::int64_t>{0, 2, 3, kWidth}}) {
    HostTensor t(DType::f16, shape), out(DType::f16, shape);
    const RopeArgs args = test::rope_args(kNope, kEmb, rotation, test::sbhd_positions(), &status);
    EXPECT_NO_THROW(test::run_rope(t, args));
    EXPECT_NO_THROW(reference::rope({t.cview(), out.view(), args}));
    EXPECT_NO_THROW(reference::rope_inplace({t.view(), args}));
  }
  const std::vector<std::int32_t> cu{0, 2};
  HostTensor no_heads(DType::f32, {2, 0, kWidth});
  EXPECT_NO_THROW(test::run_rope(no_heads, test::rope_args(kNope, kEmb, rotation,
                                                           test::thd_positions(cu), &status)));
  // An empty table is fine when no row uses it.
  HostTensor cos(DType::f32, {0, kEmb}), sin(DType::f32, {0, kEmb});
  YarnTablesCall yarn;
  yarn.cos = cos.view();
  yarn.sin = sin.view();
  EXPECT_NO_THROW(reference::yarn_tables(yarn));
  EXPECT_EQ(status, kStatusOk);
}

// --- Identities on random inputs -----------------------------------------------------------------

// A random SBHD (cp_size 2, rank 1) or THD (cu_seqlens [0, 4, 12], cp_size 2, rank 0, a padding
// row) problem of f32 activations.
struct RandomProblem {
  std::vector<std::int32_t> cu{0, 4, 12};
  Positions positions;
  HostTensor x;
  explicit RandomProblem(TokenLayout layout, DType dtype, Rng& rng, double lo = -1, double hi = 1,
                         bool signed_magnitude = false) {
    if (layout == TokenLayout::sbhd) {
      positions = test::sbhd_positions(2, 1);
      x = HostTensor(dtype, {6, 2, 3, kWidth});
    } else {
      positions = test::thd_positions(cu, FreqMode::per_sequence, 2, 0, 8);
      x = HostTensor(dtype, {7, 3, kWidth});
    }
    if (signed_magnitude) test::fill_signed(x, rng, lo, hi);
    else test::fill_uniform(x, rng, lo, hi);
  }
};

constexpr std::int64_t kTableRows = 12;

TEST(RoundTrip, InverseWithSwappedLayoutsUndoesTheRotationOfUnitTables) {
  for (std::uint64_t seed : {1u, 2u, 3u})
    for (TokenLayout layout : {TokenLayout::sbhd, TokenLayout::thd})
      for (const LayoutTriple& l : test::all_triples())
        for (bool inverse : {false, true})
          for (double m : {1.0, 1.25}) {
            SCOPED_TRACE(test::describe(l) + " seed " + std::to_string(seed) + " " +
                         std::string(to_string(layout)) + (inverse ? " inverse" : "") +
                         " m=" + std::to_string(m));
            Rng rng(seed);
            const Table table =
                test::random_unit_table(DType::f32, kTableRows, kEmb, l.table_layout, rng, m);
            // Magnitudes in [0.5, 1): the round trip error stays within a few ulps of x itself.
            RandomProblem p(layout, DType::f32, rng, 0.5, 1.0, true);
            const RopeArgs forward =
                test::rope_args(kNope, kEmb, test::make_rotation(l, inverse, table), p.positions);
            RopeArgs back = forward;
            back.rotation.in_layout = l.out_layout;
            back.rotation.out_layout = l.in_layout;
            back.rotation.inverse = !inverse;
            const HostTensor y = test::run_rope(p.x, forward);
            const HostTensor x_back = test::run_rope(y, back);
            std::int64_t worst = 0;
            p.x.for_each_index([&](const std::vector<std::int64_t>& i) {
              if (i.back() < kNope) {
                ASSERT_EQ(x_back.bits(i), p.x.bits(i));
                return;
              }
              const bool padding = layout == TokenLayout::thd && i[0] >= 6;
              const double expected = padding ? p.x.get(i) : m * m * p.x.get(i);
              worst = std::max(worst, test::ulp_distance(DType::f32, x_back.get(i),
                                                         static_cast<float>(expected)));
            });
            EXPECT_LE(worst, m == 1.0 ? 6 : 8) << "worst round-trip error in f32 ulps";
          }
}

// <rope(x), y> == <x, rope_backward(y)> up to the rounding of the two outputs.
TEST(Adjoint, RopeBackwardIsTheAdjointOfRopeForArbitraryTables) {
  for (std::uint64_t seed : {1u, 2u, 3u})
    for (TokenLayout layout : {TokenLayout::sbhd, TokenLayout::thd})
      for (const LayoutTriple& l : test::all_triples())
        for (bool inverse : {false, true}) {
          SCOPED_TRACE(test::describe(l) + " seed " + std::to_string(seed) + " " +
                       std::string(to_string(layout)) + (inverse ? " inverse" : ""));
          Rng rng(seed * 100 + 17);
          const Table table = test::random_table(DType::f32, kTableRows, kEmb, rng);
          RandomProblem px(layout, DType::f32, rng), py(layout, DType::f32, rng);
          const RopeArgs args =
              test::rope_args(kNope, kEmb, test::make_rotation(l, inverse, table), px.positions);
          const HostTensor rx = test::run_rope(px.x, args);
          const HostTensor by = test::run_rope_backward(py.x, args);
          const long double lhs = test::dot(rx, py.x), rhs = test::dot(px.x, by);
          const long double scale = test::dot_abs(rx, py.x) + test::dot_abs(px.x, by);
          EXPECT_LE(std::fabs(lhs - rhs), 0x1.0p-22L * scale)
              << "lhs " << static_cast<double>(lhs) << " rhs " << static_cast<double>(rhs);
          EXPECT_LE(std::fabs(lhs - rhs), 1e-5L * std::fabs(lhs) + 1e-6L);
        }
}

TEST(Adjoint, KvSplitBackwardIsTheAdjointOfKvSplit) {
  const std::int64_t k_dim = 4, v_dim = 5, heads = 3;
  for (std::uint64_t seed : {1u, 2u, 3u})
    for (const LayoutTriple& l : test::all_triples())
      for (bool inverse : {false, true}) {
        SCOPED_TRACE(test::describe(l) + " seed " + std::to_string(seed) +
                     (inverse ? " inverse" : ""));
        Rng rng(seed * 1000 + 5);
        const Table table = test::random_table(DType::f32, kTableRows, kEmb, rng);
        const std::vector<std::int32_t> cu{0, 4, 12};
        const KvSplitArgs args =
            test::kv_args(k_dim, v_dim, kEmb, test::make_rotation(l, inverse, table),
                          test::thd_positions(cu, FreqMode::packed, 2, 1));
        const std::int64_t rows = 7;  // 6 sequence rows and one padding row
        HostTensor kv(DType::f32, {rows, heads, k_dim + v_dim}), k_pe(DType::f32, {rows, 1, kEmb});
        HostTensor gk(DType::f32, {rows, heads, k_dim + kEmb}),
            gv(DType::f32, {rows, heads, v_dim});
        for (HostTensor* t : {&kv, &k_pe, &gk, &gv}) test::fill_uniform(*t, rng);
        HostTensor key(DType::f32, gk.shape()), value(DType::f32, gv.shape());
        HostTensor g_kv(DType::f32, kv.shape()), g_k_pe(DType::f32, k_pe.shape());
        reference::kv_split({kv.cview(), k_pe.cview(), key.view(), value.view(), args});
        reference::kv_split_backward({gk.cview(), gv.cview(), g_kv.view(), g_k_pe.view(), args});
        const long double lhs = test::dot(key, gk) + test::dot(value, gv);
        const long double rhs = test::dot(kv, g_kv) + test::dot(k_pe, g_k_pe);
        const long double scale = test::dot_abs(key, gk) + test::dot_abs(value, gv) +
                                  test::dot_abs(kv, g_kv) + test::dot_abs(k_pe, g_k_pe);
        EXPECT_LE(std::fabs(lhs - rhs), 0x1.0p-22L * scale);
        EXPECT_LE(std::fabs(lhs - rhs), 1e-5L * std::fabs(lhs) + 1e-6L);
      }
}

TEST(InPlace, EqualsOutOfPlaceBitwise) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (TokenLayout layout : {TokenLayout::sbhd, TokenLayout::thd})
      for (const LayoutTriple& l : test::all_triples())
        for (bool inverse : {false, true}) {
          SCOPED_TRACE(std::string(test::dtype_name(dtype)) + " " + test::describe(l) + " " +
                       std::string(to_string(layout)) + (inverse ? " inverse" : ""));
          Rng rng(42);
          const Table table = test::random_table(DType::bf16, kTableRows, kEmb, rng);
          RandomProblem p(layout, dtype, rng);
          const RopeArgs args =
              test::rope_args(kNope, kEmb, test::make_rotation(l, inverse, table), p.positions);
          EXPECT_TRUE(
              test::same_bits(test::run_rope_inplace(p.x, args), test::run_rope(p.x, args)));
          EXPECT_TRUE(test::same_bits(test::run_rope_backward_inplace(p.x, args),
                                      test::run_rope_backward(p.x, args)));
        }
}

// --- Rounding
// --------------------------------------------------------------------------------------

// Every element of rope / rope_backward equals the exact formula (long double) rounded once.
TEST(RoundOnce, HalfPrecisionOutputsAreTheExactFormulaRoundedOnce) {
  for (DType dtype : {DType::bf16, DType::f16})
    for (DType table_dtype : {DType::f32, DType::f16, DType::bf16})
      for (const LayoutTriple& l : {kMla, kNeox, kGptj, LayoutTriple{kHalf, kInter, kHalf}})
        for (bool inverse : {false, true})
          for (bool backward : {false, true}) {
            SCOPED_TRACE(std::string(test::dtype_name(dtype)) + " table " +
                         test::dtype_name(table_dtype) + " " + test::describe(l) +
                         (inverse ? " inverse" : "") + (backward ? " backward" : ""));
            Rng rng(77);
            const Table table = test::random_table(table_dtype, 5, kEmb, rng);
            HostTensor x(dtype, {5, 2, 2, kWidth});
            test::fill_signed(x, rng, 0.25, 4.0);
            const RopeArgs args =
                test::rope_args(kNope, kEmb, test::make_rotation(l, inverse, table),
                                test::sbhd_positions());
            const HostTensor y =
                backward ? test::run_rope_backward(x, args) : test::run_rope(x, args);
            std::int64_t mismatches = 0;
            for (std::int64_t s = 0; s < 5; ++s) {
              const std::vector<double> c = test::last_dim_values(table.cos, {s}, 0, kEmb);
              const std::vector<double> sn = test::last_dim_values(table.sin, {s}, 0, kEmb);
              for (std::int64_t b = 0; b < 2; ++b)
                for (std::int64_t h = 0; h < 2; ++h) {
                  const std::vector<long double> exact =
                      test::formula(test::last_dim_values(x, {s, b, h}, kNope, kEmb), c, sn, l,
                                    inverse, backward);
                  for (std::int64_t k = 0; k < kEmb; ++k)
                    if (y.get({s, b, h, kNope + k}) != test::round_once(dtype, exact[k]))
                      ++mismatches;
                }
            }
            EXPECT_EQ(mismatches, 0);
          }
}

// y0 = u c - v s where u c is exactly halfway between two neighbours of the output type and v s is
// far below a double ulp of u c: rounding the sum to double first lands on the halfway point
// and then rounds to even, the wrong way. Rounded once, it goes up.
struct TieCase {
  const char* name;
  DType dtype;
  double u, v, c, s;  // the table is f32
  double expected;    // the correctly rounded y0
};

TEST(RoundOnce, SumJustAboveAHalfwayPointRoundsUp) {
  const std::vector<TieCase> cases{
      // bf16: 1 * (1 + 2^-8) - 2^-60 * (-1) = 1 + 2^-8 + 2^-60 -> 1 + 2^-7.
      {"bf16", DType::bf16, 1.0, 0x1.0p-60, 1.0 + 0x1.0p-8, -1.0, 1.0 + 0x1.0p-7},
      // f16: 1 * (1 + 2^-11) - 2^-24 * (-2^-36) = 1 + 2^-11 + 2^-60 -> 1 + 2^-10.
      {"f16", DType::f16, 1.0, 0x1.0p-24, 1.0 + 0x1.0p-11, -0x1.0p-36, 1.0 + 0x1.0p-10},
      // f32: (1 + 2^-23)(1 - 2^-24) + 2^-47 (1 + 2^-13) = 1 + 2^-24 + 2^-60 -> 1 + 2^-23.
      {"f32", DType::f32, 1.0 + 0x1.0p-23, -0x1.0p-47, 1.0 - 0x1.0p-24, 1.0 + 0x1.0p-13,
       1.0 + 0x1.0p-23},
  };
  for (const TieCase& k : cases) {
    SCOPED_TRACE(k.name);
    const Table table = test::constant_table(DType::f32, 1, {k.c, k.c}, {k.s, k.s});
    HostTensor x(k.dtype, {1, 1, 1, 2});
    x.set({0, 0, 0, 0}, k.u);
    x.set({0, 0, 0, 1}, k.v);
    ASSERT_EQ(x.get({0, 0, 0, 0}), k.u);
    ASSERT_EQ(x.get({0, 0, 0, 1}), k.v);
    // Exact in long double (64 significant bits), and the tiny term is below half a double ulp.
    const long double exact =
        static_cast<long double>(k.u) * k.c - static_cast<long double>(k.v) * k.s;
    ASSERT_GT(exact, static_cast<long double>(std::fma(k.u, k.c, -(k.v * k.s))));
    ASSERT_EQ(test::round_once(k.dtype, exact), k.expected);
    const RopeArgs args =
        test::rope_args(0, 2, test::make_rotation(kGptj, false, table), test::sbhd_positions());
    EXPECT_EQ(test::run_rope(x, args).get({0, 0, 0, 0}), k.expected)
        << std::hexfloat << "rope gave " << test::run_rope(x, args).get({0, 0, 0, 0});
    HostTensor key(k.dtype, {1, 1, 1, 2}), value(k.dtype, {1, 1, 1, 0});
    HostTensor kv(k.dtype, {1, 1, 1, 0});
    reference::kv_split({kv.cview(), x.cview(), key.view(), value.view(),
                         test::kv_args(0, 0, 2, args.rotation, args.positions)});
    EXPECT_EQ(key.get({0, 0, 0, 0}), k.expected)
        << std::hexfloat << "kv_split gave " << key.get({0, 0, 0, 0});
    // The adjoint of the inverse rotation computes the same sum: g_u = gu c[tu] - gv s[tv].
    RopeArgs inverse = args;
    inverse.rotation.inverse = true;
    const double backward = test::run_rope_backward(x, inverse).get({0, 0, 0, 0});
    EXPECT_EQ(backward, k.expected) << std::hexfloat << "rope_backward gave " << backward;
    HostTensor grad_kv(k.dtype, {1, 1, 1, 0}), grad_k_pe(k.dtype, {1, 1, 1, 2});
    reference::kv_split_backward({x.cview(), value.cview(), grad_kv.view(), grad_k_pe.view(),
                                  test::kv_args(0, 0, 2, inverse.rotation, args.positions)});
    EXPECT_EQ(grad_k_pe.get({0, 0, 0, 0}), k.expected)
        << std::hexfloat << "kv_split_backward gave " << grad_k_pe.get({0, 0, 0, 0});
  }
}

TEST(RoundOnce, F32OutputsAreTheExactFormulaRoundedOnce) {
  for (const LayoutTriple& l : test::all_triples()) {
    SCOPED_TRACE(test::describe(l));
    Rng rng(99);
    const Table table = test::random_table(DType::f32, 5, kEmb, rng);
    HostTensor x(DType::f32, {5, 1, 3, kWidth});
    test::fill_signed(x, rng, 0.5,
                      1.0);  // products within a factor 4: the sum is exact in long double
    const RopeArgs args =
        test::rope_args(kNope, kEmb, test::make_rotation(l, false, table), test::sbhd_positions());
    const HostTensor y = test::run_rope(x, args);
    std::int64_t mismatches = 0;
    for (std::int64_t s = 0; s < 5; ++s)
      for (std::int64_t h = 0; h < 3; ++h) {
        const std::vector<long double> exact =
            test::formula(test::last_dim_values(x, {s, 0, h}, kNope, kEmb),
                          test::last_dim_values(table.cos, {s}, 0, kEmb),
                          test::last_dim_values(table.sin, {s}, 0, kEmb), l, false);
        for (std::int64_t k = 0; k < kEmb; ++k)
          if (y.get({s, 0, h, kNope + k}) != test::round_once(DType::f32, exact[k])) ++mismatches;
      }
    EXPECT_EQ(mismatches, 0);
  }
}

}  // namespace
}  // namespace mlarope
