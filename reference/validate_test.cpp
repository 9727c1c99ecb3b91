// SPDX-License-Identifier: Apache-2.0
// docs/semantics.md §5 through the reference: every host-known rule rejected with a message naming
// the argument and nothing written; invalid device metadata passes rows through and raises status
// bits that check_device_metadata reproduces from the same host arrays.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mlarope/error.h"
#include "mlarope/validate.h"
#include "positions.h"
#include "reference.h"
#include "test_util.h"

namespace mlarope {
namespace {

using test::HostTensor;
using test::Rng;
using test::Table;

constexpr std::int64_t kNope = 2, kEmb = 4, kWidth = kNope + kEmb;
constexpr std::int64_t kS = 4, kB = 2, kH = 3, kT = 6, kTableRows = 8;
constexpr std::uint32_t kPattern = 0x7FC0A5A5u;

// Calls f, which must throw mlarope::Error whose message contains `needle`, and checks that
// every tensor of `written` is bitwise unchanged.
void expect_rejected(const std::function<void()>& f, const std::string& needle,
                     const std::vector<const HostTensor*>& written) {
  std::vector<HostTensor> before;
  before.reserve(written.size());
  for (const HostTensor* t : written) before.push_back(*t);
  try {
    f();
    ADD_FAILURE() << "accepted; expected an error naming '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not name '" << needle << "'";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-mlarope exception: " << e.what();
  }
  for (std::size_t i = 0; i < written.size(); ++i)
    EXPECT_TRUE(test::same_storage(*written[i], before[i])) << "tensor " << i << " was written";
}

// Valid rope-family calls (SBHD [4, 2, 3, 6] or THD [6, 3, 6]) whose tests break one rule each.
struct RopeSetup {
  TokenLayout layout;
  std::vector<std::int32_t> cu{0, 2, 6};
  Table table;
  HostTensor t, out;
  RopeArgs args;

  explicit RopeSetup(TokenLayout l) : layout(l) {
    Rng rng(1);
    table = test::random_unit_table(DType::f32, kTableRows, kEmb, PairLayout::half, rng);
    const std::vector<std::int64_t> shape = l == TokenLayout::sbhd
                                                ? std::vector<std::int64_t>{kS, kB, kH, kWidth}
                                                : std::vector<std::int64_t>{kT, kH, kWidth};
    t = HostTensor(DType::f32, shape);
    out = HostTensor(DType::f32, shape);
    test::fill_uniform(t, rng);
    out.fill_bits(kPattern);
    const Positions p = l == TokenLayout::sbhd
                            ? test::sbhd_positions()
                            : test::thd_positions(cu, FreqMode::per_sequence, 1, 0, 4);
    args = test::rope_args(kNope, kEmb, test::make_rotation({}, false, table), p);
  }
  RopeCall rope() { return {t.cview(), out.view(), args}; }
  RopeInplaceCall inplace() { return {t.view(), args}; }
  RopeBackwardCall backward() { return {t.cview(), out.view(), args}; }
  RopeBackwardInplaceCall backward_inplace() { return {t.view(), args}; }
  std::vector<const HostTensor*> tensors() const { return {&t, &out, &table.cos, &table.sin}; }
};

// Break one rule in the args of every rope-family call, out of place and in place.
void expect_all_rope_calls_rejected(TokenLayout layout,
                                    const std::function<void(RopeArgs&)>& mutate,
                                    const std::string& needle) {
  RopeSetup s(layout);
  mutate(s.args);
  expect_rejected([&] { reference::rope(s.rope()); }, needle, s.tensors());
  expect_rejected([&] { reference::rope_inplace(s.inplace()); }, needle, s.tensors());
  expect_rejected([&] { reference::rope_backward(s.backward()); }, needle, s.tensors());
  expect_rejected([&] { reference::rope_backward_inplace(s.backward_inplace()); }, needle,
                  s.tensors());
}

TEST(Validate, TheBaseCallsAreValid) {
  for (TokenLayout layout : {TokenLayout::sbhd, TokenLayout::thd}) {
    RopeSetup s(layout);
    EXPECT_NO_THROW(validate(s.rope()));
    EXPECT_NO_THROW(validate(s.inplace()));
    EXPECT_NO_THROW(validate(s.backward()));
    EXPECT_NO_THROW(validate(s.backward_inplace()));
  }
}

TEST(Validate, EmbDimMustBeEvenAndAtLeastTwo) {
  for (TokenLayout layout : {TokenLayout::sbhd, TokenLayout::thd})
    for (std::int64_t emb_dim : {3, 0, -2}) {
      SCOPED_TRACE(emb_dim);
      expect_all_rope_calls_rejected(
          layout,
          [&](RopeArgs& a) {
            a.emb_dim = emb_dim;
            a.nope_dim = kWidth - emb_dim;  // keep the last dim consistent
            if (emb_dim > 0)
              a.rotation.cos.shape[1] = a.rotation.sin.shape[1] = emb_dim;  // and the tables
          },
          "emb_dim = " + std::to_string(emb_dim) + ": expected an even number");
    }
}

TEST(Validate, NopeDimMustNotBeNegative) {
  expect_all_rope_calls_rejected(
      TokenLayout::sbhd, [](RopeArgs& a) { a.nope_dim = -1; }, "nope_dim");
}

TEST(Validate, LastDimMustBeNopePlusEmb) {
  expect_all_rope_calls_rejected(
      TokenLayout::thd, [](RopeArgs& a) { a.nope_dim = 1; }, "last dim");
  RopeSetup s(TokenLayout::sbhd);
  RopeCall c = s.rope();
  c.t.shape[3] = kWidth - 1;
  c.out.shape[3] = kWidth - 1;
  expect_rejected([&] { reference::rope(c); }, "t: last dim", s.tensors());
  RopeBackwardCall b = s.backward();
  b.grad_out.shape[3] = kWidth + 1;
  b.grad_t.shape[3] = kWidth + 1;
  expect_rejected([&] { reference::rope_backward(b); }, "grad_out: last dim", s.tensors());
  RopeBackwardInplaceCall bi = s.backward_inplace();
  bi.grad.shape[3] = kWidth - 2;
  expect_rejected([&] { reference::rope_backward_inplace(bi); }, "grad: last dim", s.tensors());
}

TEST(Validate, LastDimStrideMustBeOne) {
  RopeSetup s(TokenLayout::thd);
  RopeCall c = s.rope();
  c.t.strides[2] = 2;
  expect_rejected([&] { reference::rope(c); }, "t: last-dim stride", s.tensors());
  c = s.rope();
  c.out.strides[2] = 0;
  expect_rejected([&] { reference::rope(c); }, "out: last-dim stride", s.tensors());
  RopeInplaceCall i = s.inplace();
  i.t.strides[2] = -1;
  expect_rejected([&] { reference::rope_inplace(i); }, "t: last-dim stride", s.tensors());
  RopeCall tc = s.rope();
  tc.args.rotation.cos.strides[1] = 2;
  expect_rejected([&] { reference::rope(tc); }, "cos: last-dim stride", s.tensors());
}

TEST(Validate, ShapesRanksAndDtypesMustMatch) {
  RopeSetup s(TokenLayout::sbhd);
  RopeCall c = s.rope();
  c.out.shape[2] = kH - 1;
  expect_rejected([&] { reference::rope(c); }, "out: shape", s.tensors());
  c = s.rope();
  c.out.dtype = DType::bf16;
  expect_rejected([&] { reference::rope(c); }, "out: dtype", s.tensors());
  RopeBackwardCall b = s.backward();
  b.grad_t.dtype = DType::f16;
  expect_rejected([&] { reference::rope_backward(b); }, "grad_t: dtype", s.tensors());
  c = s.rope();
  c.t.rank = 3;  // a THD-shaped view in an SBHD call
  expect_rejected([&] { reference::rope(c); }, "t: rank", s.tensors());
  c = s.rope();
  c.args.rotation.sin.dtype = DType::bf16;
  expect_rejected([&] { reference::rope(c); }, "sin: dtype", s.tensors());
  c = s.rope();
  c.args.rotation.sin.shape[0] = kTableRows - 1;
  expect_rejected([&] { reference::rope(c); }, "sin: shape", s.tensors());
  c = s.rope();
  c.args.rotation.cos.shape[1] = 2 * kEmb;
  expect_rejected([&] { reference::rope(c); }, "cos: last dim", s.tensors());
}

TEST(Validate, OutputsMustNotOverlapInputs) {
  RopeSetup s(TokenLayout::sbhd);
  RopeCall c = s.rope();
  c.out.data = const_cast<void*>(c.t.data);  // the same memory
  expect_rejected([&] { reference::rope(c); }, "out: memory overlaps t", s.tensors());
  c = s.rope();
  c.out.data = static_cast<char*>(const_cast<void*>(c.t.data)) + std::ptrdiff_t{4} * 5;  // partly
  expect_rejected([&] { reference::rope(c); }, "out: memory overlaps t", s.tensors());
  RopeBackwardCall b = s.backward();
  b.grad_t.data = const_cast<void*>(b.grad_out.data);
  expect_rejected([&] { reference::rope_backward(b); }, "grad_t: memory overlaps grad_out",
                  s.tensors());
  c = s.rope();
  c.args.rotation.cos = c.out;   // an output over a table (shape [S, B, H, D] is no table, but
  c.args.rotation.cos.rank = 2;  // as [8, 4] rows it is valid and overlaps out)
  c.args.rotation.cos.shape = {kTableRows, kEmb, 0, 0};
  c.args.rotation.cos.strides = {kEmb, 1, 0, 0};
  expect_rejected([&] { reference::rope(c); }, "out: memory overlaps cos", s.tensors());
  // In place: the tensor must not overlap the tables.
  RopeInplaceCall i = s.inplace();
  i.args.rotation.sin.data = i.t.data;
  expect_rejected([&] { reference::rope_inplace(i); }, "t: memory overlaps sin", s.tensors());
  // An output whose elements overlap each other.
  c = s.rope();
  c.out.strides[2] = 0;
  expect_rejected([&] { reference::rope(c); }, "out: strides", s.tensors());
}

TEST(Validate, ContextParallelSizeAndRank) {
  for (TokenLayout layout : {TokenLayout::sbhd, TokenLayout::thd}) {
    expect_all_rope_calls_rejected(
        layout, [](RopeArgs& a) { a.positions.cp_size = 0; }, "cp_size");
    expect_all_rope_calls_rejected(
        layout,
        [](RopeArgs& a) {
          a.positions.cp_size = 2;
          a.positions.cp_rank = 2;
        },
        "cp_rank");
    expect_all_rope_calls_rejected(
        layout, [](RopeArgs& a) { a.positions.cp_rank = -1; }, "cp_rank");
  }
}

TEST(Validate, SbhdWithContextParallelismNeedsAnEvenSequence) {
  RopeSetup s(TokenLayout::sbhd);
  s.args.positions.cp_size = 2;
  RopeCall c = s.rope();
  c.t.shape[0] = 3;
  c.out.shape[0] = 3;
  expect_rejected([&] { reference::rope(c); }, "S = 3", s.tensors());
  RopeInplaceCall i = s.inplace();
  i.t.shape[0] = 3;
  expect_rejected([&] { reference::rope_inplace(i); }, "S = 3", s.tensors());
  // Odd S is fine without CP.
  s.args.positions.cp_size = 1;
  RopeCall ok = s.rope();
  ok.t.shape[0] = 3;
  ok.out.shape[0] = 3;
  EXPECT_NO_THROW(validate(ok));
}

TEST(Validate, TableMustCoverEverySbhdRow) {
  // S = 4 needs 4 rows.
  expect_all_rope_calls_rejected(
      TokenLayout::sbhd,
      [](RopeArgs& a) {
        a.rotation.cos.shape[0] = 3;
        a.rotation.sin.shape[0] = 3;
      },
      "cos/sin");
  // With CP, rank 0 of 2 uses rows up to 2 * 4 - 1 = 7: 8 rows are enough, 7 are not.
  expect_all_rope_calls_rejected(
      TokenLayout::sbhd,
      [](RopeArgs& a) {
        a.positions.cp_size = 2;
        a.rotation.cos.shape[0] = 7;
        a.rotation.sin.shape[0] = 7;
      },
      "cos/sin");
  RopeSetup s(TokenLayout::sbhd);
  s.args.positions.cp_size = 2;
  EXPECT_NO_THROW(validate(s.rope()));
  // Rank 1 holds rows 2..5 only: 6 rows suffice.
  s.args.positions.cp_rank = 1;
  s.args.rotation.cos.shape[0] = s.args.rotation.sin.shape[0] = 6;
  EXPECT_NO_THROW(validate(s.rope()));
}

TEST(Validate, PerSequenceTableMustCoverMaxSeqlen) {
  expect_all_rope_calls_rejected(
      TokenLayout::thd, [](RopeArgs& a) { a.positions.max_seqlen = kTableRows + 1; }, "cos/sin");
  expect_all_rope_calls_rejected(
      TokenLayout::thd, [](RopeArgs& a) { a.positions.max_seqlen = -1; }, "max_seqlen");
  RopeSetup s(TokenLayout::thd);
  s.args.positions.max_seqlen = kTableRows;
  EXPECT_NO_THROW(validate(s.rope()));
  // Packed tables are not checked against max_seqlen (the host cannot know cu_seqlens[-1]).
  s.args.positions.freq_mode = FreqMode::packed;
  s.args.positions.max_seqlen = kTableRows + 1;
  EXPECT_NO_THROW(validate(s.rope()));
}

TEST(Validate, NullDataWithElementsIsRejected) {
  RopeSetup s(TokenLayout::sbhd);
  RopeCall c = s.rope();
  c.t.data = nullptr;
  expect_rejected([&] { reference::rope(c); }, "t: null data", s.tensors());
  c = s.rope();
  c.out.data = nullptr;
  expect_rejected([&] { reference::rope(c); }, "out: null data", s.tensors());
  expect_all_rope_calls_rejected(
      TokenLayout::thd, [](RopeArgs& a) { a.rotation.cos.data = nullptr; }, "cos: null data");
  expect_all_rope_calls_rejected(
      TokenLayout::thd, [](RopeArgs& a) { a.rotation.sin.data = nullptr; }, "sin: null data");
}

TEST(Validate, ThdMetadataArrays) {
  // cu_seqlens is required.
  expect_all_rope_calls_rejected(
      TokenLayout::thd, [](RopeArgs& a) { a.positions.cu_seqlens = {}; }, "cu_seqlens");
  // ... as int32.
  const std::vector<std::int64_t> cu64{0, 2, 6};
  expect_all_rope_calls_rejected(
      TokenLayout::thd, [&](RopeArgs& a) { a.positions.cu_seqlens = test::index_view(cu64); },
      "cu_seqlens");
  // position_ids of length T only.
  const std::vector<std::int32_t> ids_short{0, 1, 2, 3, 4};
  expect_all_rope_calls_rejected(
      TokenLayout::thd,
      [&](RopeArgs& a) { a.positions.position_ids = test::index_view(ids_short); }, "position_ids");
  // seq_offsets: one per sequence, int32.
  const std::vector<std::int32_t> offsets3{0, 0, 0};
  expect_all_rope_calls_rejected(
      TokenLayout::thd, [&](RopeArgs& a) { a.positions.seq_offsets = test::index_view(offsets3); },
      "seq_offsets");
  const std::vector<std::int64_t> offsets64{0, 0};
  expect_all_rope_calls_rejected(
      TokenLayout::thd, [&](RopeArgs& a) { a.positions.seq_offsets = test::index_view(offsets64); },
      "seq_offsets");
  // Outputs must not overlap the metadata either.
  RopeSetup s(TokenLayout::thd);
  RopeCall c = s.rope();
  c.args.positions.cu_seqlens.data = c.out.data;
  expect_rejected([&] { reference::rope(c); }, "out: memory overlaps cu_seqlens", s.tensors());
}

TEST(Validate, ThdOnlyArgumentsAreRejectedForSbhd) {
  const std::vector<std::int32_t> ids{0, 1, 2, 3};
  expect_all_rope_calls_rejected(
      TokenLayout::sbhd, [&](RopeArgs& a) { a.positions.position_ids = test::index_view(ids); },
      "position_ids");
  expect_all_rope_calls_rejected(
      TokenLayout::sbhd, [](RopeArgs& a) { a.positions.freq_mode = FreqMode::packed; },
      "freq_mode");
  const std::vector<std::int32_t> cu{0, 4};
  expect_all_rope_calls_rejected(
      TokenLayout::sbhd, [&](RopeArgs& a) { a.positions.cu_seqlens = test::index_view(cu); },
      "cu_seqlens");
  // SBHD seq_offsets: one per batch entry.
  const std::vector<std::int32_t> offsets{0, 0, 0};
  expect_all_rope_calls_rejected(
      TokenLayout::sbhd, [&](RopeArgs& a) { a.positions.seq_offsets = test::index_view(offsets); },
      "seq_offsets");
}

// --- kv_split
// --------------------------------------------------------------------------------------

constexpr std::int64_t kKDim = 3, kVDim = 5;

struct KvSetup {
  std::vector<std::int32_t> cu{0, 2, 6};
  Table table;
  HostTensor kv, k_pe, key, value;                      // forward
  HostTensor grad_key, grad_value, grad_kv, grad_k_pe;  // backward
  KvSplitArgs args;

  explicit KvSetup(TokenLayout layout) {
    Rng rng(2);
    table = test::random_unit_table(DType::bf16, kTableRows, kEmb, PairLayout::half, rng);
    auto shape = [&](std::int64_t heads, std::int64_t width) {
      return layout == TokenLayout::sbhd ? std::vector<std::int64_t>{kS, kB, heads, width}
                                         : std::vector<std::int64_t>{kT, heads, width};
    };
    kv = HostTensor(DType::bf16, shape(kH, kKDim + kVDim));
    k_pe = HostTensor(DType::bf16, shape(1, kEmb));
    key = HostTensor(DType::bf16, shape(kH, kKDim + kEmb));
    value = HostTensor(DType::bf16, shape(kH, kVDim));
    grad_key = HostTensor(DType::bf16, shape(kH, kKDim + kEmb));
    grad_value = HostTensor(DType::bf16, shape(kH, kVDim));
    grad_kv = HostTensor(DType::bf16, shape(kH, kKDim + kVDim));
    grad_k_pe = HostTensor(DType::bf16, shape(1, kEmb));
    for (HostTensor* t : {&kv, &k_pe, &grad_key, &grad_value}) test::fill_uniform(*t, rng);
    for (HostTensor* t : {&key, &value, &grad_kv, &grad_k_pe}) t->fill_bits(kPattern);
    const Positions p = layout == TokenLayout::sbhd
                            ? test::sbhd_positions()
                            : test::thd_positions(cu, FreqMode::per_sequence, 1, 0, 4);
    args = test::kv_args(kKDim, kVDim, kEmb, test::make_rotation({}, false, table), p);
  }
  KvSplitCall forward() { return {kv.cview(), k_pe.cview(), key.view(), value.view(), args}; }
  KvSplitBackwardCall backward() {
    return {grad_key.cview(), grad_value.cview(), grad_kv.view(), grad_k_pe.view(), args};
  }
  std::vector<const HostTensor*> tensors() const {
    return {&kv,         &k_pe,    &key,       &value,     &grad_key,
            &grad_value, &grad_kv, &grad_k_pe, &table.cos, &table.sin};
  }
};

void expect_kv_calls_rejected(TokenLayout layout, const std::function<void(KvSplitArgs&)>& mutate,
                              const std::string& needle) {
  KvSetup s(layout);
  mutate(s.args);
  expect_rejected([&] { reference::kv_split(s.forward()); }, needle, s.tensors());
  expect_rejected([&] { reference::kv_split_backward(s.backward()); }, needle, s.tensors());
}

TEST(ValidateKvSplit, TheBaseCallsAreValid) {
  for (TokenLayout layout : {TokenLayout::sbhd, TokenLayout::thd}) {
    KvSetup s(layout);
    EXPECT_NO_THROW(validate(s.forward()));
    EXPECT_NO_THROW(validate(s.backward()));
  }
}

TEST(ValidateKvSplit, DimsMustBeValid) {
  expect_kv_calls_rejected(
      TokenLayout::sbhd, [](KvSplitArgs& a) { a.k_dim = -1; }, "k_dim");
  expect_kv_calls_rejected(
      TokenLayout::thd, [](KvSplitArgs& a) { a.v_dim = -1; }, "v_dim");
  expect_kv_calls_rejected(
      TokenLayout::thd,
      [](KvSplitArgs& a) {
        a.emb_dim = 3;
        a.rotation.cos.shape[1] = a.rotation.sin.shape[1] = 3;
      },
      "emb_dim = 3: expected an even number");
  expect_kv_calls_rejected(
      TokenLayout::sbhd, [](KvSplitArgs& a) { a.emb_dim = 0; }, "emb_dim = 0: expected");
  expect_kv_calls_rejected(
      TokenLayout::sbhd, [](KvSplitArgs& a) { a.k_dim = kKDim + 1; }, "last dim");
  expect_kv_calls_rejected(
      TokenLayout::thd, [](KvSplitArgs& a) { a.v_dim = kVDim - 1; }, "last dim");
  expect_kv_calls_rejected(
      TokenLayout::thd, [](KvSplitArgs& a) { a.positions.cp_size = 0; }, "cp_size");
  expect_kv_calls_rejected(
      TokenLayout::sbhd, [](KvSplitArgs& a) { a.positions.cp_rank = 1; }, "cp_rank");
  expect_kv_calls_rejected(
      TokenLayout::thd, [](KvSplitArgs& a) { a.positions.cu_seqlens = {}; }, "cu_seqlens");
  expect_kv_calls_rejected(
      TokenLayout::sbhd, [](KvSplitArgs& a) { a.positions.freq_mode = FreqMode::packed; },
      "freq_mode");
  expect_kv_calls_rejected(
      TokenLayout::sbhd,
      [](KvSplitArgs& a) { a.rotation.cos.shape[0] = a.rotation.sin.shape[0] = kS - 1; },
      "cos/sin");
}

// Every size argument at 2^31, 2^62 and 2^63 - 1 (and a stride at -2^63): the error names it
// before any sum of sizes or product of a size and a stride can overflow (UBSan checks that in
// the sanitizer build). At 2^31 a size is either the call's own mismatch, named by its
// formula, or no size error at all (a view of 2^31 heads over these small buffers overlaps the
// others, which validate() says instead).
TEST(ValidateSizes, EverySizeArgumentIsNamedAtTheLimits) {
  const auto message_of = [](const auto& call) -> std::string {
    try {
      validate(call);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const auto rejects = [&](const auto& call, const std::vector<std::string>& needles) {
    const std::string message = message_of(call);
    EXPECT_FALSE(message.empty()) << "accepted";
    for (const std::string& needle : needles)
      EXPECT_NE(message.find(needle), std::string::npos) << message;
  };
  const auto no_size_error = [&](const auto& call) {
    const std::string message = message_of(call);
    EXPECT_EQ(message.find("2^6"), std::string::npos) << message;
  };
  for (const std::int64_t value : {std::int64_t{1} << 31, std::int64_t{1} << 62, INT64_MAX}) {
    SCOPED_TRACE("value " + std::to_string(value));
    const std::string v = std::to_string(value);
    const bool beyond = value > kMaxDim;
    for (TokenLayout layout : {TokenLayout::sbhd, TokenLayout::thd}) {
      RopeSetup r(layout);
      RopeCall c = r.rope();
      c.args.nope_dim = value;
      rejects(c, {beyond ? "nope_dim = " + v : "nope_dim + emb_dim"});
      c = r.rope();
      c.args.emb_dim = value;
      rejects(c, {"emb_dim"});
      const int heads = layout == TokenLayout::sbhd ? 2 : 1;
      c = r.rope();
      c.t.shape[heads] = c.out.shape[heads] = value;
      if (beyond) rejects(c, {"t: heads (dim " + std::to_string(heads) + ") = " + v});
      else no_size_error(c);
      c = r.rope();
      c.t.strides[0] = value;
      if (beyond) rejects(c, {"t:", "stride", v});
      else no_size_error(c);
      RopeInplaceCall in_place = r.inplace();
      in_place.t.strides[0] = INT64_MIN;
      rejects(in_place, {"t: stride " + std::to_string(INT64_MIN)});
      KvSetup k(layout);
      KvSplitCall f = k.forward();
      f.args.k_dim = value;
      rejects(f, {beyond ? "k_dim = " + v : "k_dim + v_dim"});
      f = k.forward();
      f.args.v_dim = value;
      rejects(f, {beyond ? "v_dim = " + v : "k_dim + v_dim"});
      KvSplitBackwardCall b = k.backward();
      b.args.k_dim = value;
      rejects(b, {beyond ? "k_dim = " + v : "k_dim + emb_dim"});
      b = k.backward();
      b.args.emb_dim = value;
      rejects(b, {"emb_dim"});
      b = k.backward();
      b.grad_key.shape[heads] = value;
      rejects(b, {beyond ? "grad_key: heads" : "grad_value"});
    }
  }
}

TEST(ValidateSizes, TheLargestSizeIsTwoToTheSixtyOne) {
  EXPECT_NO_THROW(check_dim(0, "k_dim"));
  EXPECT_NO_THROW(check_dim(kMaxDim, "k_dim"));
  EXPECT_THROW(check_dim(kMaxDim + 1, "k_dim"), Error);
  EXPECT_THROW(check_dim(-1, "k_dim"), Error);
  EXPECT_EQ(kMaxDim, std::int64_t{1} << 61);
}

TEST(ValidateKvSplit, ViewsMustHaveTheirShapes) {
  KvSetup s(TokenLayout::sbhd);
  KvSplitCall f = s.forward();
  f.kv.shape[3] = kKDim + kVDim + 1;
  expect_rejected([&] { reference::kv_split(f); }, "kv: last dim", s.tensors());
  f = s.forward();
  f.k_pe.shape[2] = 2;
  expect_rejected([&] { reference::kv_split(f); }, "k_pe: shape", s.tensors());
  f = s.forward();
  f.k_pe.shape[3] = kEmb + 2;
  expect_rejected([&] { reference::kv_split(f); }, "k_pe: last dim", s.tensors());
  f = s.forward();
  f.key.shape[3] = kKDim + kEmb + 1;
  expect_rejected([&] { reference::kv_split(f); }, "key: last dim", s.tensors());
  f = s.forward();
  f.value.shape[2] = kH + 1;
  expect_rejected([&] { reference::kv_split(f); }, "value: shape", s.tensors());
  f = s.forward();
  f.k_pe.dtype = DType::f16;
  expect_rejected([&] { reference::kv_split(f); }, "k_pe: dtype", s.tensors());
  f = s.forward();
  f.value.dtype = DType::f32;
  expect_rejected([&] { reference::kv_split(f); }, "value: dtype", s.tensors());
  f = s.forward();
  f.kv.strides[3] = 2;
  expect_rejected([&] { reference::kv_split(f); }, "kv: last-dim stride", s.tensors());
  f = s.forward();
  f.kv.data = nullptr;
  expect_rejected([&] { reference::kv_split(f); }, "kv: null data", s.tensors());

  KvSplitBackwardCall b = s.backward();
  b.grad_key.shape[3] = kKDim + kEmb - 1;
  expect_rejected([&] { reference::kv_split_backward(b); }, "grad_key: last dim", s.tensors());
  b = s.backward();
  b.grad_value.shape[3] = kVDim + 1;
  expect_rejected([&] { reference::kv_split_backward(b); }, "grad_value: last dim", s.tensors());
  b = s.backward();
  b.grad_kv.shape[3] = kKDim + kVDim - 1;
  expect_rejected([&] { reference::kv_split_backward(b); }, "grad_kv: last dim", s.tensors());
  b = s.backward();
  b.grad_k_pe.shape[2] = kH;
  expect_rejected([&] { reference::kv_split_backward(b); }, "grad_k_pe: shape", s.tensors());
  b = s.backward();
  b.grad_kv.dtype = DType::f32;
  expect_rejected([&] { reference::kv_split_backward(b); }, "grad_kv: dtype", s.tensors());
}

TEST(ValidateKvSplit, OutputsMustNotOverlap) {
  KvSetup s(TokenLayout::thd);
  KvSplitCall f = s.forward();
  f.value.data = f.key.data;
  expect_rejected([&] { reference::kv_split(f); }, "key: memory overlaps value", s.tensors());
  f = s.forward();
  f.key.data = const_cast<void*>(f.kv.data);
  expect_rejected([&] { reference::kv_split(f); }, "key: memory overlaps kv", s.tensors());
  f = s.forward();
  f.value.data = const_cast<void*>(f.k_pe.data);
  expect_rejected([&] { reference::kv_split(f); }, "value: memory overlaps k_pe", s.tensors());
  KvSplitBackwardCall b = s.backward();
  b.grad_k_pe.data = b.grad_kv.data;
  expect_rejected([&] { reference::kv_split_backward(b); }, "grad_kv: memory overlaps grad_k_pe",
                  s.tensors());
  b = s.backward();
  b.grad_kv.data = const_cast<void*>(b.grad_value.data);
  expect_rejected([&] { reference::kv_split_backward(b); }, "grad_kv: memory overlaps grad_value",
                  s.tensors());
}

TEST(ValidateKvSplit, PositionIdsMustHaveOneEntryPerRow) {
  const std::vector<std::int64_t> ids{0, 1, 2};
  expect_kv_calls_rejected(
      TokenLayout::thd, [&](KvSplitArgs& a) { a.positions.position_ids = test::index_view(ids); },
      "position_ids");
  const std::vector<std::int32_t> ids4{0, 1, 2, 3};
  expect_kv_calls_rejected(
      TokenLayout::sbhd, [&](KvSplitArgs& a) { a.positions.position_ids = test::index_view(ids4); },
      "position_ids");
}

// --- yarn_tables
// -----------------------------------------------------------------------------------

struct YarnSetup {
  HostTensor cos{DType::f32, {kTableRows, kEmb}}, sin{DType::f32, {kTableRows, kEmb}};
  YarnSetup() {
    cos.fill_bits(kPattern);
    sin.fill_bits(kPattern);
  }
  YarnTablesCall call() {
    YarnTablesCall c;
    c.cos = cos.view();
    c.sin = sin.view();
    return c;
  }
};

void expect_yarn_rejected(const std::function<void(YarnTablesCall&)>& mutate,
                          const std::string& needle) {
  YarnSetup s;
  YarnTablesCall c = s.call();
  mutate(c);
  expect_rejected([&] { reference::yarn_tables(c); }, needle, {&s.cos, &s.sin});
}

TEST(ValidateYarn, RejectsBadTablesAndParameters) {
  YarnSetup s;
  EXPECT_NO_THROW(validate(s.call()));
  expect_yarn_rejected([](YarnTablesCall& c) { c.cos.shape[1] = c.sin.shape[1] = 3; }, "emb_dim");
  expect_yarn_rejected([](YarnTablesCall& c) { c.sin.shape[0] = kTableRows - 1; }, "sin: shape");
  expect_yarn_rejected([](YarnTablesCall& c) { c.sin.dtype = DType::bf16; }, "sin: dtype");
  expect_yarn_rejected([](YarnTablesCall& c) { c.sin.data = c.cos.data; },
                       "sin: memory overlaps cos");
  expect_yarn_rejected([](YarnTablesCall& c) { c.cos.data = nullptr; }, "cos: null data");
  expect_yarn_rejected([](YarnTablesCall& c) { c.cos.strides[1] = 2; }, "cos: last-dim stride");
  expect_yarn_rejected([](YarnTablesCall& c) { c.cos.strides[0] = 0; }, "cos: strides");
  expect_yarn_rejected([](YarnTablesCall& c) { c.params.rotary_base = 0; }, "rotary_base");
  expect_yarn_rejected([](YarnTablesCall& c) { c.params.rotary_base = 1; }, "rotary_base");
  expect_yarn_rejected([](YarnTablesCall& c) { c.params.scaling_factor = -1; }, "scaling_factor");
  expect_yarn_rejected([](YarnTablesCall& c) { c.params.original_max_position_embeddings = 0; },
                       "original_max_position_embeddings");
  expect_yarn_rejected([](YarnTablesCall& c) { c.params.beta_fast = __builtin_nan(""); },
                       "beta_fast");
  expect_yarn_rejected([](YarnTablesCall& c) { c.params.beta_slow = 0; }, "beta_slow");
  expect_yarn_rejected([](YarnTablesCall& c) { c.params.mscale = __builtin_inf(); }, "mscale");
}

// --- Device metadata
// -------------------------------------------------------------------------------

// A THD rope call over `cu` (T rows, H = 2) whose metadata the device would flag.
struct MetadataCase {
  std::vector<std::int32_t> cu;
  std::int64_t rows;
  Table table;
  HostTensor t;
  Positions positions;
  MetadataCase(std::vector<std::int32_t> cu_seqlens, std::int64_t t_rows, std::int64_t cp_size = 1)
      : cu(std::move(cu_seqlens)), rows(t_rows) {
    Rng rng(3);
    table = test::random_unit_table(DType::f32, kTableRows, kEmb, PairLayout::half, rng);
    t = HostTensor(DType::f16, {rows, 2, kWidth});
    test::fill_uniform(t, rng);
    positions = test::thd_positions(cu, FreqMode::per_sequence, cp_size, 0);
  }
  RopeArgs args(DeviceStatus* status) {
    return test::rope_args(kNope, kEmb, test::make_rotation({}, false, table), positions, status);
  }
};

// Runs rope out of place and in place; rows in `passed` must pass through, the others must not.
// Returns the status word of the out-of-place call (both must agree).
DeviceStatus run_and_check_pass_through(MetadataCase& m, const std::vector<bool>& passed) {
  DeviceStatus status = kStatusOk, status_in_place = kStatusOk;
  const HostTensor out = test::run_rope(m.t, m.args(&status));
  const HostTensor in_place = test::run_rope_inplace(m.t, m.args(&status_in_place));
  EXPECT_EQ(status, status_in_place);
  EXPECT_TRUE(test::same_bits(out, in_place));
  for (std::int64_t r = 0; r < m.rows; ++r)
    for (std::int64_t h = 0; h < 2; ++h) {
      bool same = true;
      for (std::int64_t k = 0; k < kWidth; ++k)
        same = same && out.bits({r, h, k}) == m.t.bits({r, h, k});
      EXPECT_EQ(same, passed[r]) << "row " << r << " head " << h
                                 << (passed[r] ? " was rotated" : " passed through");
    }
  return status;
}

void expect_same_bits_from_validator(const MetadataCase& m, DeviceStatus status) {
  EXPECT_EQ(check_device_metadata(m.positions, {m.rows, 1}, kTableRows), status)
      << describe_status(status);
  const reference::RowMap map = reference::map_rows(m.positions, {m.rows, 1}, kTableRows);
  EXPECT_EQ(map.status, status);
}

TEST(DeviceMetadata, DecreasingCuSeqlensPassesEveryRowThrough) {
  MetadataCase m({0, 4, 2}, 6);
  const DeviceStatus status = run_and_check_pass_through(m, std::vector<bool>(6, true));
  EXPECT_EQ(status, kStatusBadCuSeqlens);
  expect_same_bits_from_validator(m, status);
  EXPECT_EQ(check_cu_seqlens(m.positions, m.rows), kStatusBadCuSeqlens);
}

TEST(DeviceMetadata, LengthNotDivisibleByTwiceCpSizePassesEveryRowThrough) {
  MetadataCase m({0, 4, 10}, 5, 2);  // 4 is divisible by 4, 6 is not
  const DeviceStatus status = run_and_check_pass_through(m, std::vector<bool>(5, true));
  EXPECT_EQ(status, kStatusBadSeqLength);
  expect_same_bits_from_validator(m, status);
}

TEST(DeviceMetadata, BothCuSeqlensErrorsAreReportedTogether) {
  MetadataCase m({0, 6, 4}, 5, 2);  // 6 not divisible by 4; -2 negative
  const DeviceStatus status = run_and_check_pass_through(m, std::vector<bool>(5, true));
  EXPECT_EQ(status, kStatusBadCuSeqlens | kStatusBadSeqLength);
  expect_same_bits_from_validator(m, status);
}

TEST(DeviceMetadata, CuSeqlensPastTheRowsPassesEveryRowThrough) {
  MetadataCase m({0, 4, 8}, 6);  // 8 rows of sequences in a tensor of 6
  const DeviceStatus status = run_and_check_pass_through(m, std::vector<bool>(6, true));
  EXPECT_EQ(status, kStatusBadCuSeqlens);
  expect_same_bits_from_validator(m, status);
  // With CP the local lengths count: 8 / 2 = 4 rows fit in 4 (no error) but not in 3.
  MetadataCase fits({0, 4, 8}, 4, 2), too_few({0, 4, 8}, 3, 2);
  EXPECT_EQ(run_and_check_pass_through(fits, std::vector<bool>(4, false)), kStatusOk);
  EXPECT_EQ(run_and_check_pass_through(too_few, std::vector<bool>(3, true)), kStatusBadCuSeqlens);
  expect_same_bits_from_validator(too_few, kStatusBadCuSeqlens);
}

TEST(DeviceMetadata, PositionIdsOutsideTheTablePassTheirRowsThrough) {
  for (bool wide : {false, true}) {
    SCOPED_TRACE(wide ? "i64" : "i32");
    MetadataCase m({0, 3, 6}, 6);
    const std::vector<std::int32_t> ids32{0, kTableRows, -1, 2, kTableRows - 1, 100};
    const std::vector<std::int64_t> ids64{0, kTableRows,     -1,
                                          2, kTableRows - 1, std::int64_t{1} << 40};
    m.positions.position_ids = wide ? test::index_view(ids64) : test::index_view(ids32);
    const DeviceStatus status =
        run_and_check_pass_through(m, {false, true, true, false, false, true});
    EXPECT_EQ(status, kStatusRowOutsideTable);
    expect_same_bits_from_validator(m, status);
  }
}

TEST(DeviceMetadata, NegativeSeqOffsetsPassTheirRowsThrough) {
  MetadataCase m({0, 3, 6}, 6);
  const std::vector<std::int32_t> offsets{0, -2};  // sequence 1: rows -2, -1, 0
  m.positions.seq_offsets = test::index_view(offsets);
  const DeviceStatus status =
      run_and_check_pass_through(m, {false, false, false, true, true, false});
  EXPECT_EQ(status, kStatusRowOutsideTable);
  expect_same_bits_from_validator(m, status);

  // SBHD: batch entry 0 starts at -1; batch entry 1 runs past the table.
  Rng rng(4);
  const Table table = test::random_unit_table(DType::f32, 4, kEmb, PairLayout::half, rng);
  HostTensor t(DType::f32, {3, 2, 2, kWidth});
  test::fill_uniform(t, rng);
  const std::vector<std::int32_t> sbhd_offsets{-1, 2};  // rows [-1, 0, 1] and [2, 3, 4]
  Positions p = test::sbhd_positions();
  p.seq_offsets = test::index_view(sbhd_offsets);
  DeviceStatus sbhd_status = kStatusOk;
  const HostTensor out = test::run_rope(
      t, test::rope_args(kNope, kEmb, test::make_rotation({}, false, table), p, &sbhd_status));
  EXPECT_EQ(sbhd_status, kStatusRowOutsideTable);
  EXPECT_EQ(check_device_metadata(p, {3, 2}, 4), kStatusRowOutsideTable);
  for (std::int64_t s = 0; s < 3; ++s)
    for (std::int64_t b = 0; b < 2; ++b) {
      const bool pass = (b == 0 && s == 0) || (b == 1 && s == 2);
      bool same = true;
      for (std::int64_t k = 0; k < kWidth; ++k)
        same = same && out.bits({s, b, 0, k}) == t.bits({s, b, 0, k});
      EXPECT_EQ(same, pass) << "s " << s << " b " << b;
    }
}

TEST(DeviceMetadata, StatusWordAccumulatesByOr) {
  MetadataCase m({0, 3, 6}, 6);
  const std::vector<std::int32_t> ids{0, 1, 2, 3, 4, 99};
  m.positions.position_ids = test::index_view(ids);
  DeviceStatus status = kStatusBadSeqLength;  // left from an earlier call
  test::run_rope(m.t, m.args(&status));
  EXPECT_EQ(status, kStatusBadSeqLength | kStatusRowOutsideTable);
  // A valid call leaves the word as it is.
  MetadataCase valid({0, 3, 6}, 6);
  DeviceStatus kept = kStatusBadCuSeqlens;
  test::run_rope(valid.t, valid.args(&kept));
  EXPECT_EQ(kept, kStatusBadCuSeqlens);
  // And a null status pointer is fine.
  EXPECT_NO_THROW(test::run_rope(m.t, m.args(nullptr)));
}

TEST(DeviceMetadata, ValidMetadataRaisesNoBits) {
  MetadataCase m({0, 4, 8}, 5, 2);
  EXPECT_EQ(check_device_metadata(m.positions, {m.rows, 1}, kTableRows), kStatusOk);
  EXPECT_EQ(check_cu_seqlens(m.positions, m.rows), kStatusOk);
  EXPECT_EQ(describe_status(kStatusOk), "ok");
}

// kv_split passes a bad row through by copying k_pe unrotated into every key head; its backward
// returns the unrotated head sum.
TEST(DeviceMetadata, KvSplitPassesBadRowsThroughUnrotated) {
  const std::vector<std::int32_t> cu{0, 3, 6};
  const std::vector<std::int32_t> ids{0, -4, 2, 50, 1, 3};
  Rng rng(5);
  const Table table = test::random_table(DType::f32, kTableRows, kEmb, rng);
  Positions p = test::thd_positions(cu);
  p.position_ids = test::index_view(ids);
  DeviceStatus status = kStatusOk, backward_status = kStatusOk;
  const KvSplitArgs args =
      test::kv_args(kKDim, kVDim, kEmb, test::make_rotation({}, false, table), p, &status);
  HostTensor kv(DType::bf16, {kT, kH, kKDim + kVDim}), k_pe(DType::bf16, {kT, 1, kEmb});
  test::fill_uniform(kv, rng);
  // Small integers: the head sum is exact in every dtype.
  k_pe.for_each_index([&](const std::vector<std::int64_t>& i) {
    k_pe.set(i, static_cast<double>(i[0] * 7 + i[2] - 5));
  });
  HostTensor key(DType::bf16, {kT, kH, kKDim + kEmb}), value(DType::bf16, {kT, kH, kVDim});
  reference::kv_split({kv.cview(), k_pe.cview(), key.view(), value.view(), args});
  EXPECT_EQ(status, kStatusRowOutsideTable);

  HostTensor grad_key(DType::bf16, key.shape());
  grad_key.for_each_index([&](const std::vector<std::int64_t>& i) {
    grad_key.set(i, static_cast<double>((i[0] + 1) * (i[1] + 2) - i[2]));
  });
  HostTensor grad_value(DType::bf16, value.shape()), grad_kv(DType::bf16, kv.shape()),
      grad_k_pe(DType::bf16, k_pe.shape());
  KvSplitArgs backward_args = args;
  backward_args.status = &backward_status;
  reference::kv_split_backward(
      {grad_key.cview(), grad_value.cview(), grad_kv.view(), grad_k_pe.view(), backward_args});
  EXPECT_EQ(backward_status, kStatusRowOutsideTable);

  for (std::int64_t r : {1, 3}) {  // the rows whose position_ids lie outside the table
    for (std::int64_t h = 0; h < kH; ++h)
      for (std::int64_t k = 0; k < kEmb; ++k)
        EXPECT_EQ(key.bits({r, h, kKDim + k}), k_pe.bits({r, 0, k})) << "row " << r;
    for (std::int64_t k = 0; k < kEmb; ++k) {
      double sum = 0;
      for (std::int64_t h = 0; h < kH; ++h) sum += grad_key.get({r, h, kKDim + k});
      EXPECT_EQ(grad_k_pe.get({r, 0, k}), sum) << "row " << r;
    }
  }
  // A valid row is rotated.
  EXPECT_NE(test::last_dim_values(key, {2, 0}, kKDim, kEmb),
            test::last_dim_values(k_pe, {2, 0}, 0, kEmb));
}

}  // namespace
}  // namespace mlarope
