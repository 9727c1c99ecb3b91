// SPDX-License-Identifier: Apache-2.0
// Every condition of the launch builder that chooses a vector (16-byte) path is exercised with
// exactly one of its operands false: the launch must then take the element path,
// and the GPU model must find no misaligned access running it. A positive control per op (every
// operand aligned) must take the vector paths, so a builder that never vectorizes fails too.
//
//   rope:              copy_vector = in(0) && out(0);  vector = in(nope) && out(nope)
//   kv_split:          copy_vector = kv(0) && kv(k) && key(0) && value(0);
//                      vector = k_pe(0) && key(k)
//   kv_split_backward: copy_vector = grad_key(0) && grad_value(0) && grad_kv(0) && grad_kv(k);
//                      vector = grad_key(k) && grad_k_pe(0)
//   every op:          table_vector = half table layout && f32 && emb % 8 == 0 && cos(0) && sin(0)
// x(e): the address of element e of the first row of x is 16-byte aligned (and so are x's
// row and head strides). A tensor is misaligned by shifting its data by 1 element (2 bytes of
// bf16) or by 4 (8 bytes, which keeps x(4) aligned); k = 4 makes x(k) sit 8 bytes off.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "launch/launch_builder.h"
#include "mlarope/backend.h"
#include "mlarope/error.h"
#include "test_support/model_calls.h"

namespace mlarope::test {
namespace {

constexpr std::int64_t S = 3, H = 4, kEmb = 64;

// Row (head) stride of a last dim of `d` elements: padded to 8 elements (16 bytes).
std::int64_t padded(std::int64_t d) { return (d + 7) / 8 * 8; }

// Tensors of one call in one arena, each with its own element shift.
struct Layout {
  std::int64_t k = 16, v = 24, nope = 24;
  std::map<std::string, std::int64_t> shift;  ///< tensor name -> elements past aligned
};

class CallArena {
 public:
  explicit CallArena(const Layout& layout) : layout_(layout), arena_(1 << 16), tables_(S, kEmb) {}

  // A [S, 1, heads, d] view named `name`, 16-byte-aligned unless shifted.
  TensorView tensor(const std::string& name, std::int64_t heads, std::int64_t d) {
    const auto it = layout_.shift.find(name);
    const std::int64_t shift = it == layout_.shift.end() ? 0 : it->second;
    const std::int64_t head_stride = padded(d), row_stride = heads * head_stride;
    const TensorView v =
        arena_.view(next_ + shift, {S, 1, heads, d}, {row_stride, row_stride, head_stride, 1});
    next_ += S * row_stride + 64;  // regions stay 16-byte aligned before their shift
    return v;
  }
  Rotation rotation() const { return tables_.rotation(PairLayout::interleaved, PairLayout::half); }
  const Layout& layout() const { return layout_; }

 private:
  Layout layout_;
  Bf16Arena arena_;
  UnitTables tables_;
  std::int64_t next_ = 0;
};

RopeCall rope_call(CallArena& a) {
  RopeCall c;
  const std::int64_t d = a.layout().nope + kEmb;
  c.t = a.tensor("in", H, d);
  c.out = a.tensor("out", H, d);
  c.args.nope_dim = a.layout().nope;
  c.args.emb_dim = kEmb;
  c.args.rotation = a.rotation();
  return c;
}

KvSplitCall kv_split_call(CallArena& a) {
  const Layout& l = a.layout();
  KvSplitCall c;
  c.kv = a.tensor("kv", H, l.k + l.v);
  c.k_pe = a.tensor("k_pe", 1, kEmb);
  c.key = a.tensor("key", H, l.k + kEmb);
  c.value = a.tensor("value", H, l.v);
  c.args.k_dim = l.k;
  c.args.v_dim = l.v;
  c.args.emb_dim = kEmb;
  c.args.rotation = a.rotation();
  return c;
}

KvSplitBackwardCall kv_split_backward_call(CallArena& a) {
  const Layout& l = a.layout();
  KvSplitBackwardCall c;
  c.grad_key = a.tensor("grad_key", H, l.k + kEmb);
  c.grad_value = a.tensor("grad_value", H, l.v);
  c.grad_kv = a.tensor("grad_kv", H, l.k + l.v);
  c.grad_k_pe = a.tensor("grad_k_pe", 1, kEmb);
  c.args.k_dim = l.k;
  c.args.v_dim = l.v;
  c.args.emb_dim = kEmb;
  c.args.rotation = a.rotation();
  return c;
}

struct Case {
  std::string what;  ///< which operand is false
  Layout layout;
  bool copy_vector;  ///< expected
  bool vector;       ///< expected: the vector variant
};

// The model runs the call without a finding (it throws mlarope::Error on one).
template <class Call, class Op>
void expect_clean_model_run(const Call& call, Op op, const std::string& what) {
  HostStreamOptions options;
  options.gpu_model = true;
  Stream stream = Stream::host(options);
  try {
    op(call, stream);
  } catch (const Error& e) {
    ADD_FAILURE() << what << ": " << e.what();
  }
}

const detail::LaunchProfile kProfile = detail::cuda_launch_profile();

TEST(LaunchAlignment, RopeConditionsWithOneOperandFalse) {
  const std::vector<Case> cases = {
      {"every operand aligned", {}, true, true},
      {"in(0) and in(nope): t shifted by 1", {16, 24, 24, {{"in", 1}}}, false, false},
      {"out(0) and out(nope): out shifted by 1", {16, 24, 24, {{"out", 1}}}, false, false},
  };
  for (const Case& c : cases) {
    CallArena arena(c.layout);
    const RopeCall call = rope_call(arena);
    const detail::RopeLaunch l =
        detail::make_rope_launch(call.t, call.out, call.args, {false, false}, kProfile);
    EXPECT_EQ(l.args.copy_vector, c.copy_vector) << c.what;
    EXPECT_EQ(l.variant == detail::RopeVariant::chunked_vector, c.vector) << c.what;
    expect_clean_model_run(
        call, [](const RopeCall& k, Stream& s) { rope(k, s); }, c.what);
  }
}

TEST(LaunchAlignment, KvSplitConditionsWithOneOperandFalse) {
  const std::vector<Case> cases = {
      {"every operand aligned", {}, true, true},
      {"kv(k) (k = 4); key(k) for the rope part", {4, 24, 0, {}}, false, false},
      {"kv(0): kv shifted by 4, k = 4 (kv(k) aligned); key(k)",
       {4, 24, 0, {{"kv", 4}}},
       false,
       false},
      {"key(0) (and key(k)): key shifted by 1", {16, 24, 0, {{"key", 1}}}, false, false},
      {"value(0): value shifted by 1", {16, 24, 0, {{"value", 1}}}, false, true},
      {"k_pe(0): k_pe shifted by 1", {16, 24, 0, {{"k_pe", 1}}}, true, false},
  };
  for (const Case& c : cases) {
    CallArena arena(c.layout);
    const KvSplitCall call = kv_split_call(arena);
    const detail::KvSplitLaunch l = detail::make_kv_split_launch(call, kProfile);
    EXPECT_EQ(l.args.copy_vector, c.copy_vector) << c.what;
    EXPECT_EQ(l.variant == detail::KvVariant::vector, c.vector) << c.what;
    expect_clean_model_run(
        call, [](const KvSplitCall& k, Stream& s) { kv_split(k, s); }, c.what);
  }
}

TEST(LaunchAlignment, KvSplitBackwardConditionsWithOneOperandFalse) {
  const std::vector<Case> cases = {
      {"every operand aligned", {}, true, true},
      {"grad_kv(k) (k = 4); grad_key(k) for the rope part", {4, 24, 0, {}}, false, false},
      {"grad_kv(0): grad_kv shifted by 4, k = 4; grad_key(k)",
       {4, 24, 0, {{"grad_kv", 4}}},
       false,
       false},
      {"grad_key(0) (and grad_key(k)): shifted by 1", {16, 24, 0, {{"grad_key", 1}}}, false, false},
      {"grad_value(0): shifted by 1", {16, 24, 0, {{"grad_value", 1}}}, false, true},
      {"grad_k_pe(0): shifted by 1", {16, 24, 0, {{"grad_k_pe", 1}}}, true, false},
  };
  for (const Case& c : cases) {
    CallArena arena(c.layout);
    const KvSplitBackwardCall call = kv_split_backward_call(arena);
    const detail::KvSplitBackwardLaunch l = detail::make_kv_split_backward_launch(call, kProfile);
    EXPECT_EQ(l.args.copy_vector, c.copy_vector) << c.what;
    EXPECT_EQ(l.variant == detail::KvVariant::vector, c.vector) << c.what;
    expect_clean_model_run(
        call, [](const KvSplitBackwardCall& k, Stream& s) { kv_split_backward(k, s); }, c.what);
  }
}

// f32 cos and sin tables of S rows in 16-byte-aligned storage: rows `row_stride` floats apart,
// each table starting `shift` floats in.
struct TableCase {
  std::string what;
  std::int64_t row_stride = kEmb, cos_shift = 0, sin_shift = 0;
  PairLayout table_layout = PairLayout::half;
  bool table_vector;  ///< expected
};

TEST(LaunchAlignment, TableVectorConditionsWithOneOperandFalse) {
  const std::vector<TableCase> cases = {
      {"every operand aligned", kEmb, 0, 0, PairLayout::half, true},
      {"cos(0): cos shifted by 1 float", kEmb, 1, 0, PairLayout::half, false},
      {"sin(0): sin shifted by 2 floats", kEmb, 0, 2, PairLayout::half, false},
      {"cos(0) and sin(0): rows 66 floats apart", 66, 0, 0, PairLayout::half, false},
      {"half: an interleaved table", kEmb, 0, 0, PairLayout::interleaved, false},
  };
  for (const TableCase& c : cases) {
    alignas(16) static float cos[S * 80 + 8], sin[S * 80 + 8];
    for (float& x : cos) x = 0.8f;
    for (float& x : sin) x = 0.6f;
    CallArena arena(Layout{});
    for (const bool in_place : {false, true}) {
      RopeCall call = rope_call(arena);
      if (in_place)
        call.out = TensorView{const_cast<void*>(call.t.data), call.t.dtype, call.t.rank,
                              call.t.shape, call.t.strides};
      call.args.rotation.table_layout = c.table_layout;
      call.args.rotation.cos =
          ConstTensorView{cos + c.cos_shift, DType::f32, 2, {S, kEmb}, {c.row_stride, 1}};
      call.args.rotation.sin =
          ConstTensorView{sin + c.sin_shift, DType::f32, 2, {S, kEmb}, {c.row_stride, 1}};
      const detail::RopeLaunch l =
          detail::make_rope_launch(call.t, call.out, call.args, {in_place, false}, kProfile);
      const std::string what = c.what + (in_place ? " (in place)" : "");
      EXPECT_EQ(l.args.rotation.table_vector, c.table_vector) << what;
      if (in_place) {
        const RopeInplaceCall inplace{call.out, call.args};
        expect_clean_model_run(
            inplace, [](const RopeInplaceCall& k, Stream& s) { rope_inplace(k, s); }, what);
      } else {
        expect_clean_model_run(
            call, [](const RopeCall& k, Stream& s) { rope(k, s); }, what);
      }
    }
  }
}

}  // namespace
}  // namespace mlarope::test
