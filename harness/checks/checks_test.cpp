// SPDX-License-Identifier: Apache-2.0
// The checks library: the reference passes every check on hand-made cases, with gaps, guards
// and broadcast heads; each deliberately wrong backend fails the check made for it, and the
// result names the element as (token, head, dim).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>

#include "checks/asan_guards.h"
#include "checks/checks.h"
#include "checks/compare.h"
#include "checks/strided_call.h"
#include "host_convert.h"
#include "mlarope/error.h"
#include "reference.h"

using namespace mlarope;
using namespace mlarope::harness;

namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

npy::Array random_array(DType dtype, std::vector<std::int64_t> shape, std::uint64_t seed) {
  npy::Array a = npy::make(storage_dtype(dtype), std::move(shape));
  for (std::int64_t i = 0; i < a.size(); ++i)
    store_rounded(a.bytes.data(), dtype, i,
                  static_cast<double>(mix(seed + i) >> 11) * 0x1.0p-52 - 1.0);
  return a;
}

npy::Array int_array(std::vector<std::int32_t> v) {
  npy::Array a = npy::make(npy::Dtype::i32, {static_cast<std::int64_t>(v.size())});
  std::copy(v.begin(), v.end(), a.data<std::int32_t>());
  return a;
}

// Unit YaRN tables of `rows` rows (positions from 100, so angles are not trivial).
void add_tables(Case& c, std::int64_t rows, bool random) {
  const CaseConfig& k = c.config;
  npy::Array cos = npy::make(storage_dtype(k.table_dtype), {rows, k.emb_dim});
  npy::Array sin = npy::make(storage_dtype(k.table_dtype), {rows, k.emb_dim});
  if (random) {
    cos = random_array(k.table_dtype, {rows, k.emb_dim}, 11);
    sin = random_array(k.table_dtype, {rows, k.emb_dim}, 12);
  } else {
    YarnTablesCall y;
    y.offset = 100;
    y.table_layout = k.table_layout;
    y.cos = view_of(cos, k.table_dtype);
    y.sin = view_of(sin, k.table_dtype);
    reference::yarn_tables(y);
  }
  c.arrays["cos"] = cos;
  c.arrays["sin"] = sin;
}

struct Shape {
  Op op = Op::rope;
  TokenLayout layout = TokenLayout::sbhd;
  DType dtype = DType::bf16;
  bool in_place = false, inverse = false, random_table = false;
};

// SBHD [4, 2, 3, .] or THD (sequences 3 and 2, two padding rows) [7, 3, .]; nope 4, emb 6, k 5,
// v 3.
Case make_case(const Shape& s) {
  Case c;
  CaseConfig& k = c.config;
  k.op = s.op;
  k.layout = s.layout;
  k.dtype = s.dtype;
  k.table_dtype = DType::f32;
  k.emb_dim = 6;
  k.inverse = s.inverse;
  k.in_place = s.in_place;
  const bool rope = s.op == Op::rope || s.op == Op::rope_backward;
  if (rope) k.nope_dim = 4;
  else k.k_dim = 5, k.v_dim = 3;
  std::vector<std::int64_t> rows = {4, 2};
  if (s.layout == TokenLayout::thd) {
    rows = {7};
    c.arrays["cu_seqlens"] = int_array({0, 3, 5});
    k.max_seqlen = 3;
  }
  auto shape = [&](std::int64_t heads, std::int64_t width) {
    std::vector<std::int64_t> v = rows;
    v.push_back(heads);
    v.push_back(width);
    return v;
  };
  switch (s.op) {
    case Op::rope: c.arrays["t"] = random_array(k.dtype, shape(3, 10), 1); break;
    case Op::rope_backward: c.arrays["grad_out"] = random_array(k.dtype, shape(3, 10), 2); break;
    case Op::kv_split:
      c.arrays["kv"] = random_array(k.dtype, shape(3, 8), 3);
      c.arrays["k_pe"] = random_array(k.dtype, shape(1, 6), 4);
      break;
    case Op::kv_split_backward:
      c.arrays["grad_key"] = random_array(k.dtype, shape(3, 11), 5);
      c.arrays["grad_value"] = random_array(k.dtype, shape(3, 3), 6);
      break;
  }
  add_tables(c, 8, s.random_table);
  return c;
}

CheckOptions gapped() {
  CheckOptions o;
  o.layout.head_gap = 3;
  o.layout.row_gap = 5;
  o.layout.table_gap = 2;
  o.layout.misalign = true;
  return o;
}

// The reference with a capture that defers the launches (reading buffers at replay) and an
// order seed that changes nothing: what a correct host backend offers.
Backend capable_reference() {
  Backend b = reference_backend();
  b.name = "reference+capture";
  b.capture = [](const std::function<void()>& launches) { return launches; };
  b.with_order_seed = [](std::uint64_t) { return capable_reference(); };
  return b;
}

// Element `index` of a view, moved by `delta`.
void nudge(const TensorView& v, std::vector<std::int64_t> index, double delta) {
  std::int64_t off = 0;
  for (int d = 0; d < v.rank; ++d) off += index[d] * v.strides[d];
  store_rounded(v.data, v.dtype, off, load_as_double(v.data, v.dtype, off) + delta);
}

Outcome outcome(const CheckReport& r, CheckKind k) { return r.at(k).outcome; }

std::vector<Shape> every_shape() {
  std::vector<Shape> shapes;
  for (Op op : {Op::rope, Op::rope_backward, Op::kv_split, Op::kv_split_backward})
    for (TokenLayout layout : {TokenLayout::sbhd, TokenLayout::thd})
      for (bool in_place : {false, true}) {
        if (in_place && (op == Op::kv_split || op == Op::kv_split_backward)) continue;
        shapes.push_back({op, layout, DType::bf16, in_place, in_place});
      }
  return shapes;
}

TEST(Checks, ReferencePassesEveryCheckWithGapsGuardsAndMisalignment) {
  for (const Shape& s : every_shape()) {
    const Case c = make_case(s);
    SCOPED_TRACE(std::string(to_string(s.op)) + (s.in_place ? " in place " : " ") +
                 std::string(to_string(s.layout)));
    const CheckReport r = run_checks(c, capable_reference(), gapped());
    EXPECT_TRUE(r.ok()) << format_report(r);
    EXPECT_EQ(r.results.size(), static_cast<std::size_t>(kCheckCount));
    EXPECT_EQ(outcome(r, CheckKind::graph_replay), Outcome::pass) << format_report(r);
    EXPECT_EQ(outcome(r, CheckKind::order_independence), Outcome::pass);
    EXPECT_EQ(r.at(CheckKind::value).max_ulps, 0.0);
  }
}

TEST(Checks, PlainReferenceSkipsCaptureAndOrderWithAReason) {
  const CheckReport r = run_checks(make_case({}), reference_backend());
  EXPECT_TRUE(r.ok()) << format_report(r);
  EXPECT_EQ(outcome(r, CheckKind::graph_replay), Outcome::skip);
  EXPECT_NE(r.at(CheckKind::graph_replay).message.find("no capture"), std::string::npos);
  EXPECT_EQ(outcome(r, CheckKind::order_independence), Outcome::skip);
  EXPECT_EQ(outcome(r, CheckKind::round_trip), Outcome::pass);
}

TEST(Checks, BroadcastHeadsPassForIdenticalHeads) {
  Case c = make_case({});
  npy::Array& t = c.arrays["t"];
  const std::size_t head = std::size_t{10} * 2;  // bf16 bytes of one head
  for (std::size_t row = 0; row < t.bytes.size(); row += 3 * head)
    for (int h = 1; h < 3; ++h) std::copy_n(&t.bytes[row], head, &t.bytes[row + h * head]);
  CheckOptions o = gapped();
  o.layout.broadcast_heads = true;
  const CheckReport r = run_checks(c, reference_backend(), o);
  EXPECT_TRUE(r.ok()) << format_report(r);
  EXPECT_EQ(planned_strides({4, 2, 3, 10}, o.layout, false, true)[2], 0);
}

TEST(Checks, RoundTripSkipsRandomTablesAndKvOps) {
  Shape s;
  s.random_table = true;
  const CheckReport r = run_checks(make_case(s), reference_backend());
  EXPECT_EQ(outcome(r, CheckKind::round_trip), Outcome::skip);
  EXPECT_NE(r.at(CheckKind::round_trip).message.find("not unit"), std::string::npos);
  EXPECT_TRUE(r.ok()) << format_report(r);
  const CheckReport kv = run_checks(make_case({Op::kv_split}), reference_backend());
  EXPECT_EQ(outcome(kv, CheckKind::round_trip), Outcome::skip);
  EXPECT_EQ(outcome(kv, CheckKind::in_place), Outcome::skip);
  EXPECT_EQ(outcome(kv, CheckKind::adjoint), Outcome::pass);
}

TEST(Checks, OneCorruptedElementFailsValueAndNamesIt) {
  Backend b = reference_backend();
  b.rope = [](const RopeCall& call) {
    reference::rope(call);
    nudge(call.out, {2, 1, 2, 7}, 0.25);
  };
  const CheckReport r = run_checks(make_case({}), b, gapped());
  const CheckResult& v = r.at(CheckKind::value);
  ASSERT_EQ(v.outcome, Outcome::fail) << format_report(r);
  EXPECT_EQ(v.tensor, "out");
  EXPECT_EQ(v.index, (std::vector<std::int64_t>{2, 1, 2, 7}));
  EXPECT_EQ(v.token, 2 * 2 + 1);
  EXPECT_EQ(v.head, 2);
  EXPECT_EQ(v.dim, 7);
  EXPECT_EQ(v.failures, 1);
  EXPECT_GT(v.ulps, 1.0);
  EXPECT_NEAR(v.got - v.expected, 0.25, 0.02);
  EXPECT_NE(v.message.find("token 5, head 2, dim 7"), std::string::npos) << v.message;
  EXPECT_TRUE(r.at(CheckKind::coverage).ok());
}

// A backend whose rope moves one element of `out` by one ulp (raw bits + 1).
Backend one_ulp_off(const std::vector<std::int64_t>& index) {
  Backend b = reference_backend();
  b.rope = [index](const RopeCall& call) {
    reference::rope(call);
    std::int64_t off = 0;
    for (int d = 0; d < 4; ++d) off += index[d] * call.out.strides[d];
    ++static_cast<std::uint16_t*>(call.out.data)[off];
  };
  return b;
}

TEST(Checks, CopiedElementsMustBeBitwiseRotatedOnesWithinTolerance) {
  const CheckResult copy =
      run_checks(make_case({}), one_ulp_off({0, 1, 0, 2})).at(CheckKind::value);
  ASSERT_EQ(copy.outcome, Outcome::fail);
  EXPECT_EQ(copy.dim, 2);
  EXPECT_NE(copy.message.find("bitwise"), std::string::npos) << copy.message;
  const CheckResult rotated =
      run_checks(make_case({}), one_ulp_off({0, 1, 0, 6})).at(CheckKind::value);
  EXPECT_EQ(rotated.outcome, Outcome::pass) << rotated.message;
  EXPECT_GT(rotated.max_ulps, 0.5);
}

// The value check's figures: the worst error as a fraction of the tolerance (a one-ulp bf16
// error uses about all of its allowance: 1 ulp plus a small f32 term), infinite for a copy that
// differs, and above 1 for an error outside the tolerance; ulps only where the allowance is
// relative (an error near a cancelling 0 does not count in max_ulps).
TEST(Checks, ValueReportsTheErrorAsAFractionOfTheTolerance) {
  const CheckReport clean = run_checks(make_case({}), reference_backend());
  EXPECT_EQ(clean.tolerance_fraction, 0.0);
  const CheckReport rotated = run_checks(make_case({}), one_ulp_off({0, 1, 0, 6}));
  EXPECT_GT(rotated.tolerance_fraction, 0.5);
  EXPECT_LE(rotated.tolerance_fraction, 1.0);
  EXPECT_EQ(rotated.at(CheckKind::value).max_fraction, rotated.tolerance_fraction);
  const CheckReport copy = run_checks(make_case({}), one_ulp_off({0, 1, 0, 2}));
  EXPECT_TRUE(std::isinf(copy.tolerance_fraction));
  Backend far = reference_backend();
  far.rope = [](const RopeCall& call) {
    reference::rope(call);
    nudge(call.out, {2, 1, 2, 7}, 0.25);
  };
  EXPECT_GT(run_checks(make_case({}), far).tolerance_fraction, 1.0);
  // f32 (a finer ulp): u * c and v * s cancel to a result far below them, so the allowance is
  // the f32 term, many ulps of the result; an error of half that allowance passes at 0.5 of
  // the tolerance and stays out of max_ulps.
  Case c = make_case({Op::rope, TokenLayout::sbhd, DType::f32});
  float* t = c.arrays.at("t").data<float>();
  float* cos = c.arrays.at("cos").data<float>();
  float* sin = c.arrays.at("sin").data<float>();
  for (int k = 0; k < 6; ++k) cos[k] = 0.6f, sin[k] = 0.8f;  // table row 0: a unit rotation
  t[4] = 0.8f, t[7] = 0.6f;  // row 0, head 0, pair 0 (half: dims 4 and 7): u c - v s = 0
  c.config.in_layout = PairLayout::half;
  const CaseOutputs expected = run_case(c, reference_backend());
  const double allowed = 4 * std::ldexp(1.0, -23) * (0.8 * 0.6 + 0.6 * 0.8);  // the f32 term
  Backend half_off = reference_backend();
  half_off.rope = [allowed](const RopeCall& call) {
    reference::rope(call);
    nudge(call.out, {0, 0, 0, 4}, allowed / 2);
  };
  const CheckResult v = run_checks(c, half_off).at(CheckKind::value);
  EXPECT_EQ(v.outcome, Outcome::pass) << v.message;
  EXPECT_NEAR(v.max_fraction, 0.5, 0.05) << v.message;
  EXPECT_LT(v.max_ulps, 1.0) << "an error in the absolute-term regime counted in ulps: "
                             << v.message;
  EXPECT_LT(std::fabs(expected.arrays.at("out").data<float>()[4]), 1e-6);
}

// Where the f32 products and their sum are exact, the output's rounding is the only one: a
// result one ulp off fails although the tolerance model allows an ulp elsewhere. A tie of
// bf16 (u + v 2^-8 with v = 1) must round to even, as the reference does; rounding it up
// (a wrong halfway constant in a conversion) is caught, and counted as a tie reached.
TEST(Checks, ExactResultsAllowNoUlpAndTiesRoundToEven) {
  Case c = make_case({});  // bf16, SBHD [4, 2, 3, 10], nope 4, emb 6, MLA layouts
  float* cos = c.arrays.at("cos").data<float>();
  float* sin = c.arrays.at("sin").data<float>();
  for (std::int64_t i = 0; i < c.arrays.at("cos").size(); ++i) cos[i] = 1.0f, sin[i] = -0x1p-8f;
  npy::Array& t = c.arrays.at("t");
  // Row 0, head 0, pair 0 (interleaved: dims 4 and 5): u = 1 + 2^-7 (odd), v = 1, so
  // out_u = u - v * sin = 1 + 2^-7 + 2^-8: halfway between 1 + 2^-7 and 1 + 2^-6, to even: 1 +
  // 2^-6.
  store_rounded(t.bytes.data(), DType::bf16, 4, 1.0 + 0x1p-7);
  store_rounded(t.bytes.data(), DType::bf16, 5, 1.0);
  const CaseOutputs expected = run_case(c, reference_backend());
  EXPECT_EQ(value_at(expected.arrays.at("out"), DType::bf16, 4), 1.0 + 0x1p-6);
  const CheckReport clean = run_checks(c, reference_backend());
  EXPECT_TRUE(clean.ok()) << format_report(clean);
  EXPECT_GE(clean.edges[static_cast<std::size_t>(EdgeValue::tie)], 1);
  Backend half_up = reference_backend();  // the tie rounded away from even: one ulp below
  half_up.rope = [](const RopeCall& call) {
    reference::rope(call);
    store_rounded(call.out.data, DType::bf16, 4, 1.0 + 0x1p-7);
  };
  const CheckResult v = run_checks(c, half_up).at(CheckKind::value);
  EXPECT_EQ(v.outcome, Outcome::fail);
  EXPECT_NE(v.message.find("exact"), std::string::npos) << v.message;
}

TEST(Checks, DroppedInverseFailsValueAndRoundTrip) {
  Backend b = reference_backend();
  b.rope = [](RopeCall call) {
    call.args.rotation.inverse = false;
    reference::rope(call);
  };
  Shape s;
  s.inverse = true;
  const CheckReport r = run_checks(make_case(s), b);
  EXPECT_EQ(outcome(r, CheckKind::value), Outcome::fail);
  EXPECT_EQ(outcome(r, CheckKind::round_trip), Outcome::fail) << format_report(r);
}

TEST(Checks, SkippedElementFailsCoverage) {
  Backend b = reference_backend();
  b.kv_split = [](KvSplitCall call) {
    npy::Array value = npy::make(storage_dtype(call.value.dtype),
                                 {call.value.shape[0], call.value.shape[1], call.value.shape[2]});
    TensorView real = call.value;
    call.value = view_of(value, call.value.dtype);
    reference::kv_split(call);
    for (std::int64_t t = 0; t < real.shape[0]; ++t)
      for (std::int64_t h = 0; h < real.shape[1]; ++h)
        for (std::int64_t d = 0; d < real.shape[2]; ++d)
          if (!(t == 6 && h == 1 && d == 2))
            std::memcpy(static_cast<char*>(real.data) +
                            2 * (t * real.strides[0] + h * real.strides[1] + d),
                        value.bytes.data() + 2 * ((t * real.shape[1] + h) * real.shape[2] + d), 2);
  };
  const CheckReport r = run_checks(make_case({Op::kv_split, TokenLayout::thd}), b, gapped());
  const CheckResult& cov = r.at(CheckKind::coverage);
  ASSERT_EQ(cov.outcome, Outcome::fail) << format_report(r);
  EXPECT_EQ(cov.tensor, "value");
  EXPECT_EQ(cov.index, (std::vector<std::int64_t>{6, 1, 2}));
  EXPECT_EQ(cov.token, 6);
  EXPECT_EQ(cov.failures, 2);  // the primary and the second run
  EXPECT_EQ(outcome(r, CheckKind::value), Outcome::fail);
}

TEST(Checks, MutatedInputAndNopeInPlaceFailImmutability) {
  Backend b = reference_backend();
  b.rope_backward = [](const RopeBackwardCall& call) {
    reference::rope_backward(call);
    TensorView g{const_cast<void*>(call.grad_out.data), call.grad_out.dtype, call.grad_out.rank,
                 call.grad_out.shape, call.grad_out.strides};
    nudge(g, {1, 0, 2, 3}, 1.0);
  };
  b.rope_inplace = [](const RopeInplaceCall& call) {
    reference::rope_inplace(call);
    nudge(call.t, {3, 1, 0}, 1.0);  // THD [t, h, d]: dim 0 is in the nope part
  };
  const CheckReport r1 = run_checks(make_case({Op::rope_backward}), b);
  EXPECT_EQ(outcome(r1, CheckKind::immutability), Outcome::fail) << format_report(r1);
  EXPECT_EQ(r1.at(CheckKind::immutability).tensor, "grad_out");
  Shape s{Op::rope, TokenLayout::thd};
  s.in_place = true;
  const CheckReport r2 = run_checks(make_case(s), b);
  const CheckResult& im = r2.at(CheckKind::immutability);
  ASSERT_EQ(im.outcome, Outcome::fail) << format_report(r2);
  EXPECT_EQ(im.token, 3);
  EXPECT_EQ(im.head, 1);
  EXPECT_EQ(im.dim, 0);
  EXPECT_NE(im.message.find("nope"), std::string::npos);
}

TEST(Checks, WritesIntoGapsAndGuardsFailBounds) {
  const harness::asan_guards::Suspended unpoisoned;  // the bounds finding, not ASan's stop
  const CheckOptions o = gapped();
  for (std::int64_t where : {-1, 10, 1 << 20}) {
    Backend b = reference_backend();
    b.rope = [where](const RopeCall& call) {
      reference::rope(call);
      std::int64_t off = where;  // -1: guard before; 10: the gap after head 0; huge: past the end
      if (where > 1000) {
        off = 0;
        for (int d = 0; d < 4; ++d) off += (call.out.shape[d] - 1) * call.out.strides[d];
        off += 1;
      }
      static_cast<std::uint16_t*>(call.out.data)[off] = 0x3F80;
    };
    const CheckReport r = run_checks(make_case({}), b, o);
    EXPECT_EQ(outcome(r, CheckKind::bounds), Outcome::fail) << where << "\n" << format_report(r);
  }
}

TEST(Checks, NondeterminismFailsDeterminism) {
  auto counter = std::make_shared<int>(0);
  Backend b = reference_backend();
  b.kv_split_backward = [counter](const KvSplitBackwardCall& call) {
    reference::kv_split_backward(call);
    if ((*counter)++ % 2) nudge(call.grad_k_pe, {0, 0, 0, 1}, 0.5);
  };
  const CheckReport r = run_checks(make_case({Op::kv_split_backward}), b);
  EXPECT_EQ(outcome(r, CheckKind::determinism), Outcome::fail) << format_report(r);
}

TEST(Checks, OrderDependenceFailsOrderIndependence) {
  Backend b = capable_reference();
  b.with_order_seed = [](std::uint64_t seed) {
    Backend o = reference_backend();
    o.rope = [seed](const RopeCall& call) {
      reference::rope(call);
      if (seed % 2) nudge(call.out, {0, 0, 0, 5}, 0.5);
    };
    return o;
  };
  const CheckReport r = run_checks(make_case({}), b);
  EXPECT_EQ(outcome(r, CheckKind::order_independence), Outcome::fail) << format_report(r);
}

TEST(Checks, ARaceTheRecordingRunFindsFailsTheRacesCheckAlone) {
  Backend b = capable_reference();
  EXPECT_EQ(outcome(run_checks(make_case({}), b), CheckKind::races), Outcome::skip);
  b.with_race_check = [] {
    Backend recording = reference_backend();
    recording.rope = [](const RopeCall&) { throw Error("races: kernel k, between programs"); };
    return recording;
  };
  const CheckReport r = run_checks(make_case({}), b);
  EXPECT_EQ(outcome(r, CheckKind::races), Outcome::fail) << format_report(r);
  EXPECT_NE(r.at(CheckKind::races).message.find("races: kernel k"), std::string::npos);
  EXPECT_EQ(outcome(r, CheckKind::value), Outcome::pass) << format_report(r);
  b.with_race_check = [] { return reference_backend(); };
  EXPECT_EQ(outcome(run_checks(make_case({}), b), CheckKind::races), Outcome::pass);
}

TEST(Checks, ARecordingRunThatComputesOtherBitsFailsTheRacesCheck) {
  Backend b = capable_reference();
  b.with_race_check = [] {
    Backend recording = reference_backend();
    recording.rope = [](const RopeCall& call) {
      reference::rope(call);
      nudge(call.out, {0, 0, 0, 5}, 0.5);
    };
    return recording;
  };
  EXPECT_EQ(outcome(run_checks(make_case({}), b), CheckKind::races), Outcome::fail);
}

TEST(Checks, CaptureThatKeepsOldMetadataFailsGraphReplay) {
  // The classic bug: metadata read (copied) when the graph is captured, not when it replays.
  Backend b = capable_reference();
  auto capturing = std::make_shared<bool>(false);
  auto frozen = std::make_shared<std::vector<std::int32_t>>();
  b.rope = [capturing, frozen](RopeCall call) {
    if (*capturing) {
      const auto* cu = static_cast<const std::int32_t*>(call.args.positions.cu_seqlens.data);
      frozen->assign(cu, cu + call.args.positions.cu_seqlens.size);
    }
    if (!frozen->empty()) call.args.positions.cu_seqlens.data = frozen->data();
    reference::rope(call);
  };
  b.capture = [capturing](const std::function<void()>& launches) {
    *capturing = true;
    launches();
    *capturing = false;
    return launches;
  };
  const CheckReport r = run_checks(make_case({Op::rope, TokenLayout::thd}), b);
  EXPECT_EQ(outcome(r, CheckKind::graph_replay), Outcome::fail) << format_report(r);
}

TEST(Checks, InPlaceThatDiffersFailsInPlace) {
  Backend b = reference_backend();
  b.rope_inplace = [](const RopeInplaceCall& call) {
    reference::rope_inplace(call);
    nudge(call.t, {1, 0, 1, 9}, 0.125);
  };
  const CheckReport r = run_checks(make_case({}), b);
  EXPECT_EQ(outcome(r, CheckKind::in_place), Outcome::fail) << format_report(r);
  EXPECT_EQ(outcome(r, CheckKind::value), Outcome::pass);
}

TEST(Checks, BackwardThatIsNotTheTransposeFailsAdjoint) {
  // rope_backward computed as the inverse rotation with the same layouts: right only when the
  // layouts agree; here in = interleaved, out = half.
  Backend b = reference_backend();
  b.rope_backward = [](const RopeBackwardCall& call) {
    RopeCall forward{call.grad_out, call.grad_t, call.args};
    forward.args.rotation.inverse = !forward.args.rotation.inverse;
    reference::rope(forward);
  };
  const CheckReport r = run_checks(make_case({Op::rope}), b);
  EXPECT_EQ(outcome(r, CheckKind::adjoint), Outcome::fail) << format_report(r);
}

TEST(Checks, ThrowingBackendFailsRatherThanCrashes) {
  Backend b = reference_backend();
  b.kv_split = [](const KvSplitCall&) { throw std::runtime_error("boom"); };
  const CheckReport r = run_checks(make_case({Op::kv_split}), b);
  EXPECT_EQ(outcome(r, CheckKind::value), Outcome::fail);
  EXPECT_NE(r.at(CheckKind::value).message.find("boom"), std::string::npos);
}

TEST(Checks, InvalidCaseThrowsAnError) {
  Case c = make_case({});
  c.arrays["cos"] = random_array(DType::f32, {2, 6}, 1);  // SBHD S = 4 needs 4 rows
  c.arrays["sin"] = c.arrays["cos"];
  EXPECT_THROW(run_checks(c, reference_backend()), Error);
}

TEST(Checks, OptionsRoundTripThroughJson) {
  CheckOptions o = gapped();
  o.seed = 77;
  o.checks = {CheckKind::value, CheckKind::bounds};
  const CheckOptions back = check_options_from_json(to_json(o));
  EXPECT_EQ(back.seed, 77u);
  EXPECT_EQ(back.checks, o.checks);
  EXPECT_EQ(back.layout.row_gap, 5);
  EXPECT_TRUE(back.layout.misalign);
  EXPECT_THROW(check_options_from_json(nlohmann::json{{"checks", {"nope"}}}), Error);
  EXPECT_THROW(check_options_from_json(nlohmann::json{{"layout", {{"row_gap", "x"}}}}), Error);
}

TEST(Checks, SubsetRunsOnlyWhatWasAskedFor) {
  CheckOptions o;
  o.checks = {CheckKind::bounds, CheckKind::value};
  const CheckReport r = run_checks(make_case({}), reference_backend(), o);
  ASSERT_EQ(r.results.size(), 2u);
  EXPECT_EQ(r.results[0].check, CheckKind::value);  // table order
  EXPECT_GT(r.histogram.counts[0], 0);
}

TEST(GuardedTensor, ClassifiesChangesIntoGuardsGapsAndElements) {
  GuardedTensor t(2, {2, 3}, {5, 1}, 4, false, {1, 2, 3});
  EXPECT_EQ(t.numel(), 6);
  t.fill_outside(Fill::guard);
  t.fill_elements(Fill::poison_a);
  const auto before = t.snapshot();
  auto* p = static_cast<std::uint16_t*>(t.data());
  p[3] = 9;   // gap after row 0
  p[6] = 9;   // element [1, 1]
  p[-1] = 9;  // guard before
  p[8] = 9;   // guard after (span is 8 elements)
  const auto changes = t.changes(before, 10);
  ASSERT_EQ(changes.size(), 4u);
  EXPECT_EQ(changes[0].region, GuardedTensor::Region::guard_before);
  EXPECT_EQ(changes[1].region, GuardedTensor::Region::gap);
  EXPECT_EQ(changes[2].region, GuardedTensor::Region::element);
  EXPECT_EQ(changes[2].flat, 4);
  EXPECT_EQ(changes[3].region, GuardedTensor::Region::guard_after);
  EXPECT_TRUE(t.holds(0, Fill::poison_a));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0u);
}

}  // namespace
