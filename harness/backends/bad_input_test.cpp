// SPDX-License-Identifier: Apache-2.0
// The bad input suite (docs/semantics.md §5) on every backend: each host-known validity rule, for
// every op, gives an mlarope::Error naming the argument and leaves every byte of memory (inputs,
// outputs, gaps, guards, status word) untouched; zero-size calls are no-ops; and garbage device
// metadata (cu_seqlens, position_ids, seq_offsets) raises the status bits of check_device_metadata,
// passes the right rows through, and writes nothing but the outputs (every backend's whole memory
// must equal the reference's byte for byte: the data is chosen so that every result is exact).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/bad_input_util.h"
#include "backends/case_run.h"
#include "mlarope/backend.h"
#include "mlarope/error.h"
#include "mlarope/validate.h"
#include "reference.h"

namespace mlarope::bad_input {
namespace {

constexpr std::int32_t kI32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int32_t kI32Min = std::numeric_limits<std::int32_t>::min();
constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();

// --- Running on a backend ----------------------------------------------------------------------

// The CUDA backend gets a device copy of the whole arena (every pointer of the call moved into
// it) and the whole arena back afterwards, so writes outside the views show up on the host too.
// The copy keeps each address modulo 256 (place_copy), so misaligned views stay misaligned.
class DeviceArena {
 public:
  explicit DeviceArena(Arena& arena)
      : arena_(arena), placement_(place_copy(arena.base(), arena.size())),
        buffer_(BackendKind::cuda, placement_.buffer_bytes) {
    buffer_.copy_from_host(arena.base(), arena.size(), placement_.offset);
  }
  template <class P>
  P* move(P* p) const {
    const auto* c = reinterpret_cast<const unsigned char*>(p);
    if (c < arena_.base() || c >= arena_.base() + arena_.size()) return p;
    return reinterpret_cast<P*>(
        const_cast<unsigned char*>(static_cast<const unsigned char*>(buffer_.data()) +
                                   placement_.offset + (c - arena_.base())));
  }
  template <class Void>
  BasicTensorView<Void> move(BasicTensorView<Void> v) const {
    v.data = move(v.data);
    return v;
  }
  template <class Args>
  Args move_args(Args a) const {
    a.rotation.cos = move(a.rotation.cos);
    a.rotation.sin = move(a.rotation.sin);
    a.positions.cu_seqlens.data = move(a.positions.cu_seqlens.data);
    a.positions.position_ids.data = move(a.positions.position_ids.data);
    a.positions.seq_offsets.data = move(a.positions.seq_offsets.data);
    a.status = move(a.status);
    return a;
  }
  void copy_back() { buffer_.copy_to_host(arena_.base(), arena_.size(), placement_.offset); }

 private:
  Arena& arena_;
  CopyPlacement placement_;
  DeviceBuffer buffer_;
};

// One backend under test: "reference", "host" (harness::Backend) or "cuda" (arena mirror).
class Runner {
 public:
  explicit Runner(const std::string& name) : name_(name) {
    if (name == "cuda") {
      stream_ = std::make_shared<Stream>(Stream::cuda());
    } else {
      backend_ = harness::find_backend(name);
      if (name == "host") stream_ = std::make_shared<Stream>(Stream::host());
    }
  }
  const std::string& name() const { return name_; }

  void run(Built& b) const {
    if (name_ != "cuda") return bad_input::run(backend_, b);
    DeviceArena d(b.arena);
    // Copy back whether the call returns or throws: a rejected call must not have written
    // device memory either.
    run_then_finish([&] { run_on_device(d, b); },
                    [&] {
                      stream_->synchronize();
                      d.copy_back();
                    });
  }

  void run_on_device(const DeviceArena& d, Built& b) const {
    switch (b.spec.op) {
      case EntryPoint::rope:
        mlarope::rope({d.move(b.in), d.move(b.out), d.move_args(b.rope_args)}, *stream_);
        break;
      case EntryPoint::rope_inplace:
        mlarope::rope_inplace({d.move(b.io), d.move_args(b.rope_args)}, *stream_);
        break;
      case EntryPoint::rope_backward:
        mlarope::rope_backward({d.move(b.in), d.move(b.out), d.move_args(b.rope_args)}, *stream_);
        break;
      case EntryPoint::rope_backward_inplace:
        mlarope::rope_backward_inplace({d.move(b.io), d.move_args(b.rope_args)}, *stream_);
        break;
      case EntryPoint::kv_split:
        mlarope::kv_split({d.move(b.in0), d.move(b.in1), d.move(b.out0), d.move(b.out1),
                           d.move_args(b.kv_args)},
                          *stream_);
        break;
      case EntryPoint::kv_split_backward:
        mlarope::kv_split_backward({d.move(b.in0), d.move(b.in1), d.move(b.out0), d.move(b.out1),
                                    d.move_args(b.kv_args)},
                                   *stream_);
        break;
    }
  }

  // harness::Backend has no yarn member: the entry points directly.
  void yarn(YarnTablesCall call, Arena& arena) const {
    if (name_ != "cuda") {
      const Arena::Poisoned poisoned(arena);
      if (name_ == "reference") return reference::yarn_tables(call);
      mlarope::yarn_tables(call, *stream_);
      stream_->synchronize();
      return;
    }
    DeviceArena d(arena);
    call.cos = d.move(call.cos);
    call.sin = d.move(call.sin);
    run_then_finish([&] { mlarope::yarn_tables(call, *stream_); },
                    [&] {
                      stream_->synchronize();
                      d.copy_back();
                    });
  }

 private:
  std::string name_;
  harness::Backend backend_;
  std::shared_ptr<Stream> stream_;
};

class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!backend_available(GetParam(), &why)) GTEST_SKIP() << why;
    runner_ = std::make_unique<Runner>(GetParam());
  }
  const Runner& runner() const { return *runner_; }

 private:
  std::unique_ptr<Runner> runner_;
};

class BadInput : public BackendTest {};
class GarbageMetadata : public BackendTest {};

const char* layout_name(TokenLayout l) { return l == TokenLayout::sbhd ? "sbhd" : "thd"; }

std::string trace(const Spec& s) {
  return std::string(entry_point_name(s.op)) + " " + layout_name(s.layout) + " seed " +
         std::to_string(s.seed);
}

// --- Rejections --------------------------------------------------------------------------------

// Run the call, which must throw mlarope::Error whose message holds every string of `needles`,
// and leave every byte of the arena as it was.
void expect_rejected(const Runner& runner, Built& b, const std::vector<std::string>& needles) {
  const std::vector<unsigned char> before = b.arena.snapshot();
  try {
    runner.run(b);
    ADD_FAILURE() << "accepted; expected an error naming '" << needles.front() << "'";
  } catch (const Error& e) {
    for (const std::string& needle : needles)
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "message '" << e.what() << "' does not name '" << needle << "'";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-mlarope exception: " << e.what();
  }
  EXPECT_TRUE(b.arena.same_bytes(b.arena.snapshot(), before)) << "a rejected call wrote memory";
}

using SpecEdit = std::function<void(Spec&)>;
// Breaks one rule of a built call; returns the strings the error must hold (empty: the rule
// does not apply to this op or layout).
using CallEdit = std::function<std::vector<std::string>(Built&)>;

const std::vector<TokenLayout> kBothLayouts = {TokenLayout::sbhd, TokenLayout::thd};

// For every op and layout: build the spec (edited), break the call (edited), expect rejection.
// Returns how many calls were checked.
int check_rule(const Runner& runner, const std::vector<TokenLayout>& layouts,
               const SpecEdit& edit_spec, const CallEdit& edit_call,
               const std::vector<EntryPoint>& ops = all_entry_points()) {
  int checked = 0;
  for (EntryPoint op : ops)
    for (TokenLayout layout : layouts) {
      Spec s;
      s.op = op;
      s.layout = layout;
      if (edit_spec) edit_spec(s);
      Built b;
      build(b, s);
      const std::vector<std::string> needles =
          edit_call ? edit_call(b) : std::vector<std::string>{};
      if (edit_call && needles.empty()) continue;
      SCOPED_TRACE(trace(s));
      expect_rejected(runner, b, needles);
      ++checked;
    }
  return checked;
}

// Several variants of one rule: each edit applies to one named view of the call.
int check_view_rule(const Runner& runner, const std::vector<TokenLayout>& layouts,
                    const SpecEdit& edit_spec,
                    const std::function<std::vector<std::string>(Built&, Built::Named&)>& edit_view,
                    bool include_tables) {
  int checked = 0;
  for (EntryPoint op : all_entry_points())
    for (TokenLayout layout : layouts) {
      Spec s;
      s.op = op;
      s.layout = layout;
      if (edit_spec) edit_spec(s);
      std::size_t count = 0;
      {
        Built probe;
        build(probe, s);
        count = (include_tables ? probe.all_views() : probe.activations()).size();
      }
      for (std::size_t i = 0; i < count; ++i) {
        Built b;
        build(b, s);
        std::vector<Built::Named> views = include_tables ? b.all_views() : b.activations();
        const std::vector<std::string> needles = edit_view(b, views[i]);
        if (needles.empty()) continue;
        SCOPED_TRACE(trace(s) + " view " + views[i].name);
        expect_rejected(runner, b, needles);
        ++checked;
      }
    }
  return checked;
}

// --- Accepted calls ----------------------------------------------------------------------------

// Run the reference and the backend from the same memory: the backend's memory afterwards must
// equal the reference's byte for byte, and the reference writes only output elements and the
// status word. Returns the backend's status word.
DeviceStatus expect_matches_reference(const Runner& runner, Built& b) {
  static const harness::Backend reference = harness::reference_backend();
  const std::vector<unsigned char> initial = b.arena.snapshot();
  const std::vector<bool> mask = b.writable_mask();
  try {
    run(reference, b);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the reference rejected a valid call: " << e.what();
    return b.status_word();
  }
  const std::vector<unsigned char> expected = b.arena.snapshot();
  EXPECT_TRUE(b.arena.same_bytes(expected, initial, &mask))
      << "the reference wrote outside the outputs";
  b.arena.restore(initial);
  try {
    runner.run(b);
  } catch (const std::exception& e) {
    ADD_FAILURE() << runner.name() << " rejected a valid call: " << e.what();
  }
  EXPECT_TRUE(b.arena.same_bytes(b.arena.snapshot(), expected))
      << runner.name() << " differs from the reference";
  return b.status_word();
}

TEST_P(BadInput, TheBaseCallsAreValidAndMatchTheReference) {
  for (EntryPoint op : all_entry_points())
    for (TokenLayout layout : kBothLayouts)
      for (int variant = 0; variant < 3; ++variant) {
        Spec s;
        s.op = op;
        s.layout = layout;
        if (variant == 1) s.pad = 2;  // gaps in every activation view
        if (variant == 2) {           // context parallelism, rank 1 of 2
          s.cp_size = 2;
          s.cp_rank = 1;
          s.cu = {0, 4, 12};  // local lengths 2 and 4
        }
        Built b;
        build(b, s);
        SCOPED_TRACE(trace(s) + " variant " + std::to_string(variant));
        EXPECT_EQ(expect_matches_reference(runner(), b), kStatusOk);
      }
}

// emb_dim even and >= 2.
TEST_P(BadInput, EmbDimOddOrZero) {
  for (std::int64_t emb : {3, 0, 1}) {
    SCOPED_TRACE(emb);
    EXPECT_EQ(check_rule(
                  runner(), kBothLayouts, [&](Spec& s) { s.emb = emb; }, nullptr),
              12);
  }
  // A negative emb_dim in the args (the shapes cannot follow it).
  check_rule(runner(), kBothLayouts, nullptr, [](Built& b) -> std::vector<std::string> {
    b.emb_dim() = -2;
    return {"emb_dim = -2"};
  });
}

// nope_dim, k_dim, v_dim >= 0 (the shapes follow the dims: width nope + emb and so on).
TEST_P(BadInput, NegativeDims) {
  const std::vector<EntryPoint> rope_ops = {EntryPoint::rope, EntryPoint::rope_inplace,
                                            EntryPoint::rope_backward,
                                            EntryPoint::rope_backward_inplace};
  const std::vector<EntryPoint> kv_ops = {EntryPoint::kv_split, EntryPoint::kv_split_backward};
  auto needs = [](const std::string& needle) {
    return [needle](Built&) { return std::vector<std::string>{needle}; };
  };
  EXPECT_EQ(check_rule(
                runner(), kBothLayouts, [](Spec& s) { s.nope = -1; }, needs("nope_dim = -1"),
                rope_ops),
            8);
  EXPECT_EQ(check_rule(
                runner(), kBothLayouts, [](Spec& s) { s.k = -1; }, needs("k_dim = -1"), kv_ops),
            4);
  EXPECT_EQ(check_rule(
                runner(), kBothLayouts, [](Spec& s) { s.v = -2; }, needs("v_dim = -2"), kv_ops),
            4);
}

// Last dim equals nope + emb (k + v for kv, k + emb for key, v for value, emb for k_pe).
TEST_P(BadInput, LastDimMismatch) {
  // One view's last dim off by one.
  const int per_view = check_view_rule(
      runner(), kBothLayouts, nullptr,
      [](Built&, Built::Named& v) -> std::vector<std::string> {
        v.shape()[v.rank() - 1] += 1;
        return {v.name + ": "};
      },
      true);
  EXPECT_EQ(per_view, 2 * (4 + 3 + 4 + 3 + 6 + 6));  // every view of every op, both layouts
  // The dims of the args off by one: every view of the call disagrees; the first one is named.
  check_rule(runner(), kBothLayouts, nullptr, [](Built& b) -> std::vector<std::string> {
    if (is_kv(b.spec.op)) {
      b.kv_args.k_dim += 1;
    } else {
      b.rope_args.nope_dim += 1;
    }
    return {b.activations().front().name + ": last dim"};
  });
  check_rule(runner(), kBothLayouts, nullptr, [](Built& b) -> std::vector<std::string> {
    if (!is_kv(b.spec.op)) return {};
    b.kv_args.v_dim += 1;
    return {b.spec.op == EntryPoint::kv_split ? "kv: last dim" : "grad_value: last dim"};
  });
}

// Last-dim stride 1, for every view, tables included.
TEST_P(BadInput, LastDimStrideNotOne) {
  for (std::int64_t stride : {2, 0, -1}) {
    SCOPED_TRACE(stride);
    check_view_rule(
        runner(), kBothLayouts, nullptr,
        [&](Built&, Built::Named& v) -> std::vector<std::string> {
          v.strides()[v.rank() - 1] = stride;
          return {v.name + ": last-dim stride"};
        },
        true);
  }
}

// The input extents an output of `b` must not overlap, in the order validate() checks them.
std::vector<std::pair<std::string, const void*>> input_targets(Built& b) {
  std::vector<std::pair<std::string, const void*>> targets;
  for (Built::Named& v : b.activations())
    if (!v.output) targets.push_back({v.name, v.data()});
  targets.push_back({"cos", b.rotation().cos.data});
  targets.push_back({"sin", b.rotation().sin.data});
  const Positions& p = b.positions();
  if (p.cu_seqlens.present()) targets.push_back({"cu_seqlens", p.cu_seqlens.data});
  if (p.position_ids.present()) targets.push_back({"position_ids", p.position_ids.data});
  if (p.seq_offsets.present()) targets.push_back({"seq_offsets", p.seq_offsets.data});
  return targets;
}

SpecEdit with_metadata_arrays() {
  return [](Spec& s) {
    s.has_seq_offsets = true;
    s.seq_offsets = {0, 0};  // one per sequence: B = 2 in SBHD, two in cu in THD
    if (s.layout == TokenLayout::thd) {
      s.has_position_ids = true;
      s.position_ids = {0, 1, 0, 1, 2, 3};
    }
  };
}

// Outputs (and the tensor of an in-place call) must not overlap any input: the activations, the
// tables, cu_seqlens, position_ids, seq_offsets; key must not overlap value, nor grad_kv grad_k_pe.
TEST_P(BadInput, OutputOverlapsAnInput) {
  int checked = 0;
  for (EntryPoint op : all_entry_points())
    for (TokenLayout layout : kBothLayouts) {
      Spec s;
      s.op = op;
      s.layout = layout;
      with_metadata_arrays()(s);
      std::vector<std::string> outputs;
      std::size_t targets = 0;
      {
        Built probe;
        build(probe, s);
        for (Built::Named& v : probe.activations())
          if (v.output) outputs.push_back(v.name);
        targets = input_targets(probe).size();
      }
      for (std::size_t o = 0; o < outputs.size(); ++o)
        for (std::size_t t = 0; t < targets; ++t)
          for (bool partial : {false, true}) {
            Built b;
            build(b, s);
            Built::Named out = [&] {
              for (Built::Named& v : b.activations())
                if (v.name == outputs[o]) return v;
              return b.activations().front();
            }();
            const auto target = input_targets(b)[t];
            if (partial) {
              // The output's last element on the first byte of the input (activations only).
              if (t > 0 || is_inplace(op)) continue;
              std::int64_t span = 1;
              for (int d = 0; d < out.rank(); ++d) span += (out.shape()[d] - 1) * out.strides()[d];
              out.set_data(static_cast<const unsigned char*>(target.second) -
                           (span - 1) * static_cast<std::int64_t>(dtype_size(out.dtype())));
            } else {
              out.set_data(target.second);
            }
            SCOPED_TRACE(trace(s) + " " + out.name + (partial ? " ends on " : " on ") +
                         target.first);
            expect_rejected(runner(), b, {out.name + ": memory overlaps " + target.first});
            ++checked;
          }
    }
  EXPECT_GT(checked, 60);
  // Output on output: the smaller one moved onto the larger one.
  for (TokenLayout layout : kBothLayouts) {
    Spec s;
    s.layout = layout;
    s.op = EntryPoint::kv_split;
    Built f;
    build(f, s);
    f.out1.data = f.out0.data;  // value on key
    SCOPED_TRACE(layout_name(layout));
    expect_rejected(runner(), f, {"key: memory overlaps value"});
    s.op = EntryPoint::kv_split_backward;
    Built g;
    build(g, s);
    g.out1.data = static_cast<unsigned char*>(g.out0.data) + 2;  // grad_k_pe inside grad_kv
    expect_rejected(runner(), g, {"grad_kv: memory overlaps grad_k_pe"});
  }
}

// An output whose strides make elements overlap: a zero (or too small) head or row stride.
TEST_P(BadInput, OutputWithOverlappingElements) {
  for (int which : {0, 1, 2}) {
    SCOPED_TRACE(which);
    const int checked = check_view_rule(
        runner(), kBothLayouts, nullptr,
        [&](Built& b, Built::Named& v) -> std::vector<std::string> {
          if (!v.output) return {};
          const int head = v.rank() - 2;
          if (which == 0) {  // zero head stride
            if (v.shape()[head] < 2) return {};
            v.strides()[head] = 0;
          } else if (which == 1) {  // zero row stride
            v.strides()[0] = 0;
          } else {  // a row stride one element short of the row
            const int row = b.spec.layout == TokenLayout::sbhd ? 1 : 0;
            v.strides()[row] = v.shape()[head] * v.strides()[head] - 1;
          }
          return {v.name + ": strides make elements overlap"};
        },
        false);
    EXPECT_GE(checked, which == 0 ? 2 * 6 : 2 * 8);
  }
}

// 1 <= cp_size, 0 <= cp_rank < cp_size.
TEST_P(BadInput, ContextParallelSizeAndRank) {
  struct Cp {
    std::int64_t size, rank;
    const char* needle;
  };
  for (const Cp& cp :
       {Cp{0, 0, "cp_size = 0"}, Cp{-1, 0, "cp_size = -1"}, Cp{2, 2, "cp_rank = 2"},
        Cp{1, 1, "cp_rank = 1"}, Cp{2, -1, "cp_rank = -1"}, Cp{1, -1, "cp_rank = -1"}}) {
    SCOPED_TRACE(cp.needle);
    EXPECT_EQ(check_rule(
                  runner(), kBothLayouts,
                  [&](Spec& s) {
                    s.cp_size = cp.size;
                    s.cp_rank = cp.rank;
                  },
                  [&](Built&) { return std::vector<std::string>{cp.needle}; }),
              12);
  }
}

// SBHD with cp_size > 1 needs an even S; odd S without CP is fine.
TEST_P(BadInput, SbhdOddSequenceWithContextParallelism) {
  for (std::int64_t cp : {2, 4}) {
    SCOPED_TRACE(cp);
    check_rule(
        runner(), {TokenLayout::sbhd},
        [&](Spec& s) {
          s.S = 3;
          s.cp_size = cp;
          s.table_rows = 16;
        },
        [](Built&) { return std::vector<std::string>{"S = 3"}; });
  }
  for (EntryPoint op : all_entry_points()) {
    Spec s;
    s.op = op;
    s.S = 3;
    Built b;
    build(b, s);
    SCOPED_TRACE(entry_point_name(op));
    EXPECT_EQ(expect_matches_reference(runner(), b), kStatusOk);
  }
}

// Table rows cover every freq_row the host knows: SBHD S rows (with CP: the highest cp_pos);
// THD per_sequence: max_seqlen rows.
TEST_P(BadInput, TableTooShort) {
  auto cos_sin = [](Built&) { return std::vector<std::string>{"cos/sin"}; };
  check_rule(
      runner(), {TokenLayout::sbhd}, [](Spec& s) { s.table_rows = 3; }, cos_sin);
  // CP rank 0 of 2 with S = 4 uses rows up to 7; rank 1 uses rows 2..5.
  check_rule(
      runner(), {TokenLayout::sbhd},
      [](Spec& s) {
        s.cp_size = 2;
        s.table_rows = 7;
      },
      cos_sin);
  check_rule(
      runner(), {TokenLayout::sbhd},
      [](Spec& s) {
        s.cp_size = 2;
        s.cp_rank = 1;
        s.table_rows = 5;
      },
      cos_sin);
  check_rule(
      runner(), {TokenLayout::thd}, [](Spec& s) { s.max_seqlen = 9; }, cos_sin);
  check_rule(
      runner(), {TokenLayout::thd}, [](Spec& s) { s.max_seqlen = -1; },
      [](Built&) { return std::vector<std::string>{"max_seqlen = -1"}; });
  // Enough rows: accepted.
  for (EntryPoint op : all_entry_points()) {
    SCOPED_TRACE(entry_point_name(op));
    Spec a;
    a.op = op;
    a.cp_size = 2;
    a.cp_rank = 1;
    a.table_rows = 6;
    Built ba;
    build(ba, a);
    EXPECT_EQ(expect_matches_reference(runner(), ba), kStatusOk);
    Spec t;
    t.op = op;
    t.layout = TokenLayout::thd;
    t.max_seqlen = 8;
    Built bt;
    build(bt, t);
    EXPECT_EQ(expect_matches_reference(runner(), bt), kStatusOk);
    t.freq_mode = FreqMode::packed;  // packed tables are not checked against max_seqlen
    t.max_seqlen = 100;
    Built bp;
    build(bp, t);
    EXPECT_EQ(expect_matches_reference(runner(), bp), kStatusOk);
  }
}

// Dtypes as declared: out vs t, sin vs cos, key/value/k_pe vs kv, and so on; unknown dtypes.
TEST_P(BadInput, DtypeMismatch) {
  const int checked = check_view_rule(
      runner(), kBothLayouts, nullptr,
      [](Built& b, Built::Named& v) -> std::vector<std::string> {
        const bool leader = v.name == "cos" || (v.name == b.activations().front().name);
        if (leader) return {};
        v.dtype() = v.dtype() == DType::bf16 ? DType::f16 : DType::bf16;
        return {v.name + ": dtype"};
      },
      true);
  EXPECT_EQ(checked, 2 * (1 + 0 + 1 + 0 + 3 + 3) + 2 * 6);
  check_view_rule(
      runner(), kBothLayouts, nullptr,
      [](Built&, Built::Named& v) -> std::vector<std::string> {
        v.dtype() = static_cast<DType>(7);
        return {v.name + ": "};
      },
      true);
}

// Null data with a non-zero size, for every view.
TEST_P(BadInput, NullDataWithElements) {
  check_view_rule(
      runner(), kBothLayouts, nullptr,
      [](Built&, Built::Named& v) -> std::vector<std::string> {
        v.set_data(nullptr);
        return {v.name + ": null data"};
      },
      true);
}

// THD needs cu_seqlens (int32, N + 1 >= 1 entries); position_ids have T entries of int32 or
// int64; seq_offsets have B (SBHD) or N (THD) int32 entries.
TEST_P(BadInput, MetadataArraysOfTheWrongSizeOrType) {
  auto rule = [&](const SpecEdit& spec, const std::function<void(Positions&)>& edit,
                  const std::string& needle,
                  const std::vector<TokenLayout>& layouts = {TokenLayout::thd}) {
    SCOPED_TRACE(needle);
    check_rule(runner(), layouts, spec, [&](Built& b) {
      edit(b.positions());
      return std::vector<std::string>{needle};
    });
  };
  rule(
      nullptr, [](Positions& p) { p.cu_seqlens = {}; }, "cu_seqlens: missing");
  rule(
      nullptr, [](Positions& p) { p.cu_seqlens.size = 0; }, "cu_seqlens: 0 entries");
  rule(
      nullptr, [](Positions& p) { p.cu_seqlens.type = IndexType::i64; }, "cu_seqlens: index type");
  rule(
      with_metadata_arrays(), [](Positions& p) { p.position_ids.size = 5; },
      "position_ids: 5 entries");
  rule(
      with_metadata_arrays(), [](Positions& p) { p.position_ids.size = 7; },
      "position_ids: 7 entries");
  rule(
      with_metadata_arrays(), [](Positions& p) { p.position_ids.type = static_cast<IndexType>(2); },
      "position_ids: index type");
  rule(
      with_metadata_arrays(), [](Positions& p) { p.seq_offsets.size = 3; },
      "seq_offsets: 3 entries", kBothLayouts);
  rule(
      with_metadata_arrays(), [](Positions& p) { p.seq_offsets.size = 1; },
      "seq_offsets: 1 entries", kBothLayouts);
  rule(
      with_metadata_arrays(), [](Positions& p) { p.seq_offsets.type = IndexType::i64; },
      "seq_offsets: index type", kBothLayouts);
}

// position_ids, cu_seqlens and freq_mode = packed are THD only.
TEST_P(BadInput, ThdOnlyArgumentsForSbhd) {
  const std::vector<std::int32_t> values{0, 1, 2, 3, 4, 5, 6, 7};
  auto rule = [&](const std::function<void(Positions&)>& edit, const std::string& needle) {
    SCOPED_TRACE(needle);
    check_rule(runner(), {TokenLayout::sbhd}, nullptr, [&](Built& b) {
      edit(b.positions());
      return std::vector<std::string>{needle};
    });
  };
  rule(
      [&](Positions& p) {
        p.position_ids = {values.data(), IndexType::i32, 4};
      },
      "position_ids: given for an SBHD");
  rule(
      [&](Positions& p) {
        p.position_ids = {values.data(), IndexType::i32, 8};
      },
      "position_ids: given for an SBHD");
  rule(
      [&](Positions& p) {
        p.cu_seqlens = {values.data(), IndexType::i32, 3};
      },
      "cu_seqlens: given for an SBHD");
  rule([](Positions& p) { p.freq_mode = FreqMode::packed; }, "freq_mode = packed");
}

// Zero-size tensors are valid no-ops, with or without data pointers. (kv_split_backward with
// H = 0 still writes grad_k_pe: the adjoint of an empty head sum is zero.)
TEST_P(BadInput, ZeroSizeTensorsAreNoOps) {
  struct Shape {
    TokenLayout layout;
    std::int64_t S, B, T, H;
    std::vector<std::int64_t> cu;
    const char* name;
  };
  const std::vector<Shape> shapes = {
      {TokenLayout::sbhd, 0, 2, 0, 3, {}, "S = 0"},
      {TokenLayout::sbhd, 4, 0, 0, 3, {}, "B = 0"},
      {TokenLayout::sbhd, 4, 2, 0, 0, {}, "H = 0"},
      {TokenLayout::thd, 0, 0, 0, 3, {0}, "T = 0, N = 0"},
      {TokenLayout::thd, 0, 0, 0, 3, {0, 0, 0}, "T = 0, N = 2"},
      {TokenLayout::thd, 0, 0, 6, 0, {0, 2, 6}, "H = 0"},
  };
  for (const Shape& shape : shapes)
    for (EntryPoint op : all_entry_points())
      for (bool null_data : {false, true})
        for (DeviceStatus initial : {kStatusOk, kStatusBadSeqLength}) {
          Spec s;
          s.op = op;
          s.layout = shape.layout;
          s.S = shape.S;
          s.B = shape.B;
          s.T = shape.T;
          s.H = shape.H;
          s.cu = shape.cu;
          s.initial_status = initial;
          s.cp_size = shape.layout == TokenLayout::sbhd ? 2 : 1;  // CP with S = 0 is fine too
          s.table_rows = 16;
          Built b;
          build(b, s);
          bool all_outputs_empty = true;
          for (Built::Named& v : b.activations()) {
            if (v.numel() == 0 && null_data) v.set_data(nullptr);
            if (v.output && v.numel() != 0) all_outputs_empty = false;
          }
          SCOPED_TRACE(trace(s) + " " + shape.name + (null_data ? " null data" : ""));
          const std::vector<unsigned char> before = b.arena.snapshot();
          EXPECT_EQ(expect_matches_reference(runner(), b), initial);
          if (all_outputs_empty) {
            EXPECT_TRUE(b.arena.same_bytes(b.arena.snapshot(), before)) << "not a no-op";
          }
          EXPECT_EQ(all_outputs_empty, !(op == EntryPoint::kv_split_backward && shape.H == 0));
        }
}

// Zero elements whatever the other dimensions, a huge row or head count included: a no-op that
// returns at once (no grid over 2^40 empty rows, no allocation per row).
TEST_P(BadInput, ZeroSizeWithHugeDimensionsIsANoOp) {
  constexpr std::int64_t kHuge = std::int64_t{1} << 40;
  int checked = 0;
  for (EntryPoint op : all_entry_points())
    for (TokenLayout layout : kBothLayouts)
      for (bool huge_rows : {true, false}) {  // 2^40 rows with H = 0, or 2^40 heads and no rows
        // kv_split_backward's grad_k_pe is [rows, 1, emb]: with rows it has elements.
        if (op == EntryPoint::kv_split_backward && huge_rows) continue;
        Spec s;
        s.op = op;
        s.layout = layout;
        if (huge_rows) {
          s.H = 0;
        } else if (layout == TokenLayout::sbhd) {
          s.S = 0;
        } else {
          s.T = 0;
          s.cu = {0};
        }
        Built b;
        build(b, s);
        for (Built::Named& v : b.activations()) {
          const int dim = huge_rows ? 0 : v.rank() - 2;
          if (!huge_rows && v.shape()[dim] == 1) continue;  // k_pe-like views have one head
          v.shape()[dim] = kHuge;
        }
        SCOPED_TRACE(trace(s) + (huge_rows ? " 2^40 rows, H = 0" : " 2^40 heads, no rows"));
        const std::vector<unsigned char> before = b.arena.snapshot();
        try {
          runner().run(b);
        } catch (const std::exception& e) {
          ADD_FAILURE() << "rejected a zero-size call: " << e.what();
        }
        EXPECT_TRUE(b.arena.same_bytes(b.arena.snapshot(), before)) << "not a no-op";
        ++checked;
      }
  EXPECT_EQ(checked, 2 * (6 + 5));
}

// Sizes whose element count or byte extent does not fit in 62 bits: a named error, before any
// index arithmetic can overflow.
TEST_P(BadInput, SizesThatOverflowAreRejected) {
  constexpr std::int64_t k2to40 = std::int64_t{1} << 40;
  // More than 2^62 elements (the product itself overflows 64 bits).
  check_view_rule(
      runner(), kBothLayouts, nullptr,
      [&](Built&, Built::Named& v) -> std::vector<std::string> {
        v.shape()[0] = k2to40;
        v.shape()[1] = k2to40;
        return {v.name + ": ", "elements"};
      },
      false);
  // A byte extent past 2^62 through one huge stride (few elements).
  check_view_rule(
      runner(), kBothLayouts, nullptr,
      [&](Built&, Built::Named& v) -> std::vector<std::string> {
        if (v.shape()[0] < 2) return {};
        v.strides()[0] = std::int64_t{1} << 61;
        return {v.name + ": ", "bytes"};
      },
      true);
}

// cp_size feeds the CP position arithmetic (L * cp_size): bounded by 2^20 with a named error.
TEST_P(BadInput, ContextParallelSizeBounded) {
  for (std::int64_t cp :
       {std::int64_t{1} << 62, (std::int64_t{1} << 20) + 1, std::int64_t{1} << 40}) {
    SCOPED_TRACE(cp);
    EXPECT_EQ(check_rule(
                  runner(), kBothLayouts,
                  [&](Spec& s) {
                    s.cp_size = cp;
                    s.cp_rank = 1;
                  },
                  [&](Built&) {
                    return std::vector<std::string>{"cp_size = " + std::to_string(cp), "2^20"};
                  }),
              12);
  }
}

// Every data pointer aligned to its element size (a GPU traps otherwise): activations, tables,
// cu_seqlens, position_ids (int32 and int64), seq_offsets and the status word.
TEST_P(BadInput, MisalignedPointers) {
  for (std::ptrdiff_t shift : {1, 2}) {
    SCOPED_TRACE("shift " + std::to_string(shift));
    const int views = check_view_rule(
        runner(), kBothLayouts, nullptr,
        [&](Built&, Built::Named& v) -> std::vector<std::string> {
          if (static_cast<std::ptrdiff_t>(dtype_size(v.dtype())) <= shift) return {};
          v.set_data(static_cast<const unsigned char*>(v.data()) + shift);
          return {v.name + ": ", "aligned"};
        },
        true);
    // shift 1: every view (bf16 activations, f32 tables); shift 2: the f32 tables only.
    EXPECT_EQ(views, shift == 1 ? 2 * (4 + 3 + 4 + 3 + 6 + 6) : 2 * 2 * 6);
  }
  struct Meta {
    const char* name;
    std::ptrdiff_t shift;
    IndexType position_type;
  };
  for (const Meta& m :
       {Meta{"cu_seqlens", 2, IndexType::i32}, Meta{"position_ids", 1, IndexType::i32},
        Meta{"position_ids", 4, IndexType::i64}, Meta{"seq_offsets", 2, IndexType::i32},
        Meta{"status", 2, IndexType::i32}}) {
    SCOPED_TRACE(std::string(m.name) + " + " + std::to_string(m.shift));
    const std::string name = m.name;
    EXPECT_EQ(check_rule(
                  runner(), {TokenLayout::thd},
                  [&](Spec& s) {
                    with_metadata_arrays()(s);
                    s.position_ids_type = m.position_type;
                  },
                  [&](Built& b) -> std::vector<std::string> {
                    Positions& p = b.positions();
                    auto shifted = [&](const void* data) {
                      return static_cast<const unsigned char*>(data) + m.shift;
                    };
                    if (name == "cu_seqlens") p.cu_seqlens.data = shifted(p.cu_seqlens.data);
                    if (name == "position_ids") p.position_ids.data = shifted(p.position_ids.data);
                    if (name == "seq_offsets") p.seq_offsets.data = shifted(p.seq_offsets.data);
                    if (name == "status")
                      b.status() = reinterpret_cast<DeviceStatus*>(
                          reinterpret_cast<unsigned char*>(b.status()) + m.shift);
                    return {name + ": ", "aligned"};
                  }),
              6);
  }
}

// --- yarn_tables ---------------------------------------------------------------------------------

struct YarnSetup {
  Arena arena;
  YarnTablesCall call;
  YarnSetup(std::int64_t rows = 8, std::int64_t emb = 4) {
    const std::size_t c = arena.add("cos", static_cast<std::size_t>(rows * emb * 4));
    const std::size_t s = arena.add("sin", static_cast<std::size_t>(rows * emb * 4));
    arena.finish();
    call.cos = contiguous_view<void>(arena.at(c), DType::f32, {rows, emb});
    call.sin = contiguous_view<void>(arena.at(s), DType::f32, {rows, emb});
  }
};

TEST_P(BadInput, YarnTablesBadParameters) {
  using Edit = std::function<void(YarnTablesCall&)>;
  struct Rule {
    Edit edit;
    const char* needle;
  };
  const double nan = std::nan(""), inf = HUGE_VAL;
  const std::vector<Rule> rules = {
      {[](YarnTablesCall& c) { c.cos.shape[1] = c.sin.shape[1] = 3; }, "emb_dim = 3"},
      {[](YarnTablesCall& c) { c.cos.shape[1] = c.sin.shape[1] = 0; }, "emb_dim = 0"},
      {[](YarnTablesCall& c) {
         for (TensorView* v : {&c.cos, &c.sin}) {
           v->rank = 3;
           v->shape = {8, 1, 4, 0};
           v->strides = {4, 4, 1, 0};
         }
       },
       "cos: rank"},
      {[](YarnTablesCall& c) { c.sin.shape[0] = 7; }, "sin: shape"},
      {[](YarnTablesCall& c) { c.sin.dtype = DType::bf16; }, "sin: dtype"},
      {[](YarnTablesCall& c) { c.cos.dtype = DType::f16; }, "sin: dtype"},
      {[](YarnTablesCall& c) { c.sin.data = c.cos.data; }, "sin: memory overlaps cos"},
      {[](YarnTablesCall& c) { c.sin.data = static_cast<char*>(c.cos.data) + 4; },
       "sin: memory overlaps cos"},
      {[](YarnTablesCall& c) { c.cos.data = nullptr; }, "cos: null data"},
      {[](YarnTablesCall& c) { c.sin.data = nullptr; }, "sin: null data"},
      {[](YarnTablesCall& c) { c.cos.strides[1] = 2; }, "cos: last-dim stride"},
      {[](YarnTablesCall& c) { c.sin.strides[1] = 0; }, "sin: last-dim stride"},
      {[](YarnTablesCall& c) { c.cos.strides[0] = 0; }, "cos: strides make elements overlap"},
      {[](YarnTablesCall& c) { c.sin.strides[0] = 3; }, "sin: strides make elements overlap"},
      {[](YarnTablesCall& c) { c.params.rotary_base = 0; }, "rotary_base"},
      {[](YarnTablesCall& c) { c.params.rotary_base = 1; }, "rotary_base"},
      {[](YarnTablesCall& c) { c.params.rotary_base = -10; }, "rotary_base"},
      {[=](YarnTablesCall& c) { c.params.rotary_base = inf; }, "rotary_base"},
      {[=](YarnTablesCall& c) { c.params.rotary_base = nan; }, "rotary_base"},
      {[](YarnTablesCall& c) { c.params.scaling_factor = 0; }, "scaling_factor"},
      {[](YarnTablesCall& c) { c.params.scaling_factor = -1; }, "scaling_factor"},
      {[=](YarnTablesCall& c) { c.params.scaling_factor = nan; }, "scaling_factor"},
      {[](YarnTablesCall& c) { c.params.original_max_position_embeddings = 0; },
       "original_max_position_embeddings"},
      {[=](YarnTablesCall& c) { c.params.original_max_position_embeddings = inf; },
       "original_max_position_embeddings"},
      {[](YarnTablesCall& c) { c.params.beta_fast = 0; }, "beta_fast"},
      {[=](YarnTablesCall& c) { c.params.beta_fast = nan; }, "beta_fast"},
      {[](YarnTablesCall& c) { c.params.beta_slow = -1; }, "beta_slow"},
      {[=](YarnTablesCall& c) { c.params.mscale = inf; }, "mscale"},
      {[=](YarnTablesCall& c) { c.params.mscale = nan; }, "mscale"},
      {[=](YarnTablesCall& c) { c.params.mscale_all_dim = nan; }, "mscale_all_dim"},
      {[](YarnTablesCall& c) {  // mscale(s, mscale_all_dim) = 0.1 * -10 * ln(e) + 1 = 0
         c.params.scaling_factor = std::exp(1.0);
         c.params.mscale_all_dim = -10;
       },
       "mscale_all_dim"},
      {[](YarnTablesCall& c) { c.table_layout = static_cast<PairLayout>(5); }, "table_layout"},
  };
  for (const Rule& rule : rules) {
    SCOPED_TRACE(rule.needle);
    YarnSetup y;
    rule.edit(y.call);
    const std::vector<unsigned char> before = y.arena.snapshot();
    try {
      runner().yarn(y.call, y.arena);
      ADD_FAILURE() << "accepted; expected an error naming '" << rule.needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(rule.needle), std::string::npos)
          << "message '" << e.what() << "' does not name '" << rule.needle << "'";
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw a non-mlarope exception: " << e.what();
    }
    EXPECT_TRUE(y.arena.same_bytes(y.arena.snapshot(), before)) << "a rejected call wrote memory";
  }
  // A valid call writes the tables and nothing else; an override of the concentration makes the
  // zero-denominator parameters valid. Zero rows are a no-op.
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    YarnSetup y(variant == 2 ? 0 : 8);
    y.call.offset = 3;
    if (variant == 1) {
      y.call.params.scaling_factor = std::exp(1.0);
      y.call.params.mscale_all_dim = -10;
      y.call.params.concentration_override = 1.0;
    }
    std::vector<bool> mask(y.arena.size(), false);
    mark_view(mask, y.arena.base(), y.call.cos);
    mark_view(mask, y.arena.base(), y.call.sin);
    const std::vector<unsigned char> before = y.arena.snapshot();
    EXPECT_NO_THROW(runner().yarn(y.call, y.arena));
    EXPECT_TRUE(y.arena.same_bytes(y.arena.snapshot(), before, &mask))
        << "wrote outside the tables";
    for (std::int64_t r = 0; r < y.call.cos.shape[0]; ++r)
      for (std::int64_t e = 0; e < 4; ++e) {
        EXPECT_TRUE(std::isfinite(element(y.call.cos, {r, e})));
        EXPECT_LE(std::fabs(element(y.call.sin, {r, e})), 1.0 + 1e-6);
      }
  }
}

// --- Garbage device metadata ---------------------------------------------------------------------

// Offset of element (row, head, k) of an activation view; SBHD rows are s * B + b.
std::int64_t element_offset(const Built& b, const ConstTensorView& v, std::int64_t row,
                            std::int64_t h, std::int64_t k) {
  if (b.spec.layout == TokenLayout::thd)
    return row * v.strides[0] + h * v.strides[1] + k * v.strides[2];
  const std::int64_t s = row / b.spec.B, bb = row % b.spec.B;
  return s * v.strides[0] + bb * v.strides[1] + h * v.strides[2] + k * v.strides[3];
}

// Checks that each row of `passed` passed through in `b` (after the backend ran), against the
// inputs of a pristine build of the same spec.
void expect_passed_through(Built& b, const std::vector<std::int64_t>& passed) {
  Built p;
  build(p, b.spec);
  auto at = [&](const ConstTensorView& v, std::int64_t row, std::int64_t h, std::int64_t k) {
    return load_as_double(v.data, v.dtype, element_offset(b, v, row, h, k));
  };
  const Spec& s = b.spec;
  for (std::int64_t row : passed) {
    SCOPED_TRACE("row " + std::to_string(row));
    bool ok = true;
    for (std::int64_t h = 0; h < s.H; ++h) switch (s.op) {
        case EntryPoint::rope:
        case EntryPoint::rope_backward:
          for (std::int64_t k = 0; k < s.nope + s.emb; ++k)
            ok = ok && at(b.out, row, h, k) == at(p.in, row, h, k);
          break;
        case EntryPoint::rope_inplace:
        case EntryPoint::rope_backward_inplace:
          for (std::int64_t k = 0; k < s.nope + s.emb; ++k)
            ok = ok && at(b.io, row, h, k) == at(p.io, row, h, k);
          break;
        case EntryPoint::kv_split:
          for (std::int64_t k = 0; k < s.k; ++k)
            ok = ok && at(b.out0, row, h, k) == at(p.in0, row, h, k);
          for (std::int64_t e = 0; e < s.emb; ++e)
            ok = ok && at(b.out0, row, h, s.k + e) == at(p.in1, row, 0, e);
          for (std::int64_t j = 0; j < s.v; ++j)
            ok = ok && at(b.out1, row, h, j) == at(p.in0, row, h, s.k + j);
          break;
        case EntryPoint::kv_split_backward:
          for (std::int64_t k = 0; k < s.k; ++k)
            ok = ok && at(b.out0, row, h, k) == at(p.in0, row, h, k);
          for (std::int64_t j = 0; j < s.v; ++j)
            ok = ok && at(b.out0, row, h, s.k + j) == at(p.in1, row, h, j);
          break;
      }
    if (s.op == EntryPoint::kv_split_backward)
      for (std::int64_t e = 0; e < s.emb; ++e) {
        double sum = 0;
        for (std::int64_t h = 0; h < s.H; ++h) sum += at(p.in0, row, h, s.k + e);
        ok = ok && at(b.out1, row, 0, e) == sum;
      }
    EXPECT_TRUE(ok) << "row " << row << " did not pass through";
  }
}

// Runs the call on the reference and the backend (memories must agree byte for byte), checks
// the status word against check_device_metadata on the same host arrays and against `expected`
// (when given), and the rows of `passed`.
void expect_metadata_outcome(const Runner& runner, Built& b, const DeviceStatus* expected,
                             const std::vector<std::int64_t>* passed) {
  const DeviceStatus validator =
      check_device_metadata(b.positions(), b.row_shape(), b.spec.table_rows);
  if (expected) {
    EXPECT_EQ(validator, *expected) << "check_device_metadata: " << describe_status(validator);
  }
  // A call that writes no element is a no-op (docs/semantics.md §5): nothing runs to raise a bit.
  bool writes_nothing = true;
  for (Built::Named& v : b.activations())
    if (v.output && v.numel() != 0) writes_nothing = false;
  const DeviceStatus status = expect_matches_reference(runner, b);
  EXPECT_EQ(status, writes_nothing ? b.spec.initial_status : b.spec.initial_status | validator)
      << runner.name() << ": " << describe_status(status)
      << ", check_device_metadata: " << describe_status(validator);
  if (passed) expect_passed_through(b, *passed);
}

std::vector<std::int64_t> all_rows(std::int64_t n) {
  std::vector<std::int64_t> rows;
  for (std::int64_t r = 0; r < n; ++r) rows.push_back(r);
  return rows;
}

// Bit patterns that a round trip through arithmetic would change: signalling and quiet NaNs
// with payloads, signed zeros, a subnormal and an infinity.
std::vector<std::uint32_t> special_bits(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return {0x7F800001u, 0xFFC00123u, 0x80000000u, 0x00000001u, 0xFF800000u, 0x7FBFFFFFu};
    case DType::bf16: return {0x7F81u, 0xFFC3u, 0x8000u, 0x0001u, 0xFF80u, 0x7FBFu};
    case DType::f16: return {0x7C01u, 0xFE03u, 0x8000u, 0x0001u, 0xFC00u, 0x7DFFu};
  }
  return {};
}

void set_element_bits(const ConstTensorView& v, std::int64_t offset, std::uint32_t bits) {
  auto* p = static_cast<unsigned char*>(const_cast<void*>(v.data)) +
            offset * static_cast<std::int64_t>(dtype_size(v.dtype));
  if (dtype_size(v.dtype) == 4) {
    std::memcpy(p, &bits, 4);
  } else {
    const auto half = static_cast<std::uint16_t>(bits);
    std::memcpy(p, &half, 2);
  }
}

std::uint32_t bits_at(const Built& b, const ConstTensorView& v, std::int64_t row, std::int64_t h,
                      std::int64_t k) {
  const auto* p = static_cast<const unsigned char*>(v.data) +
                  element_offset(b, v, row, h, k) * static_cast<std::int64_t>(dtype_size(v.dtype));
  std::uint32_t bits = 0;
  std::memcpy(&bits, p, dtype_size(v.dtype));
  return bits;
}

// docs/semantics.md §5: pass-through rows (padding rows, invalid metadata) are copied bit for bit,
// NaN payloads and signed zeros included, by the reference and every backend; so are the copied
// parts of kv_split and kv_split_backward. Checked against the inputs themselves, not only
// against the reference.
TEST_P(GarbageMetadata, PassThroughIsBitwise) {
  for (EntryPoint op : all_entry_points())
    for (DType dtype : {DType::bf16, DType::f16, DType::f32})
      for (bool bad_metadata : {false, true}) {
        Spec s;
        s.op = op;
        s.layout = TokenLayout::thd;
        s.act = dtype;
        s.cu =
            bad_metadata ? std::vector<std::int64_t>{0, 4, 2} : std::vector<std::int64_t>{0, 2, 4};
        Built b;
        build(b, s);
        // Rows that pass through: the padding rows 4 and 5, or every row of bad cu_seqlens.
        const std::vector<std::int64_t> passed =
            bad_metadata ? all_rows(s.T) : std::vector<std::int64_t>{4, 5};
        const std::vector<std::uint32_t> bits = special_bits(dtype);
        std::size_t next = 0;
        auto fill = [&](const ConstTensorView& v, std::int64_t heads, std::int64_t from,
                        std::int64_t to) {
          for (std::int64_t row : passed)
            for (std::int64_t h = 0; h < heads; ++h)
              for (std::int64_t k = from; k < to; ++k)
                set_element_bits(v, element_offset(b, v, row, h, k), bits[next++ % bits.size()]);
        };
        const std::int64_t width = s.nope + s.emb;
        switch (op) {
          case EntryPoint::rope:
          case EntryPoint::rope_backward: fill(b.in, s.H, 0, width); break;
          case EntryPoint::rope_inplace:
          case EntryPoint::rope_backward_inplace: fill(b.io, s.H, 0, width); break;
          case EntryPoint::kv_split:
            fill(b.in0, s.H, 0, s.k + s.v);
            fill(b.in1, 1, 0, s.emb);
            break;
          case EntryPoint::kv_split_backward:  // grad_k_pe is a head sum, not a copy: the k and v
                                               // parts only
            fill(b.in0, s.H, 0, s.k);
            fill(b.in1, s.H, 0, s.v);
            break;
        }
        SCOPED_TRACE(trace(s) + " " + std::string(to_string(dtype)) +
                     (bad_metadata ? " bad cu_seqlens" : " padding"));
        Built pristine;  // the inputs as they were, for in-place calls
        build(pristine, s);
        const std::vector<unsigned char> inputs = b.arena.snapshot();
        expect_matches_reference(runner(), b);
        pristine.arena.restore(inputs);
        int mismatches = 0;
        auto expect_same = [&](const ConstTensorView& out, std::int64_t oh, std::int64_t ok,
                               const ConstTensorView& in, std::int64_t ih, std::int64_t ik,
                               std::int64_t row) {
          if (bits_at(b, out, row, oh, ok) != bits_at(pristine, in, row, ih, ik) &&
              ++mismatches <= 3)
            ADD_FAILURE() << "row " << row << " head " << oh << " element " << ok << ": bits 0x"
                          << std::hex << bits_at(b, out, row, oh, ok) << ", input bits 0x"
                          << bits_at(pristine, in, row, ih, ik);
        };
        for (std::int64_t row : passed)
          for (std::int64_t h = 0; h < s.H; ++h) switch (op) {
              case EntryPoint::rope:
              case EntryPoint::rope_backward:
                for (std::int64_t k = 0; k < width; ++k)
                  expect_same(b.out, h, k, pristine.in, h, k, row);
                break;
              case EntryPoint::rope_inplace:
              case EntryPoint::rope_backward_inplace:
                for (std::int64_t k = 0; k < width; ++k)
                  expect_same(b.io, h, k, pristine.io, h, k, row);
                break;
              case EntryPoint::kv_split:
                for (std::int64_t k = 0; k < s.k; ++k)
                  expect_same(b.out0, h, k, pristine.in0, h, k, row);
                for (std::int64_t e = 0; e < s.emb; ++e)
                  expect_same(b.out0, h, s.k + e, pristine.in1, 0, e, row);
                for (std::int64_t j = 0; j < s.v; ++j)
                  expect_same(b.out1, h, j, pristine.in0, h, s.k + j, row);
                break;
              case EntryPoint::kv_split_backward:
                for (std::int64_t k = 0; k < s.k; ++k)
                  expect_same(b.out0, h, k, pristine.in0, h, k, row);
                for (std::int64_t j = 0; j < s.v; ++j)
                  expect_same(b.out0, h, s.k + j, pristine.in1, h, j, row);
                break;
            }
        EXPECT_EQ(mismatches, 0);
      }
}

struct NamedCase {
  const char* name;
  SpecEdit edit;
  DeviceStatus expected;
  std::vector<std::int64_t> passed;  ///< rows that pass through (those of check: all rows)
};

TEST_P(GarbageMetadata, NamedCases) {
  const std::vector<NamedCase> cases = {
      {"decreasing cu_seqlens",
       [](Spec& s) {
         s.cu = {0, 4, 2};
       },
       kStatusBadCuSeqlens, all_rows(6)},
      {"negative first length",
       [](Spec& s) {
         s.cu = {3, 1, 6};
       },
       kStatusBadCuSeqlens, all_rows(6)},
      {"length not divisible by 2 * cp_size",
       [](Spec& s) {
         s.T = 5;
         s.cu = {0, 4, 10};
         s.cp_size = 2;
       },
       kStatusBadSeqLength, all_rows(5)},
      {"both cu_seqlens errors",
       [](Spec& s) {
         s.T = 5;
         s.cu = {0, 6, 4};
         s.cp_size = 2;
         s.cp_rank = 1;
       },
       kStatusBadCuSeqlens | kStatusBadSeqLength, all_rows(5)},
      {"cu_seqlens past the rows",
       [](Spec& s) {
         s.cu = {0, 4, 8};
       },
       kStatusBadCuSeqlens, all_rows(6)},
      {"cu_seqlens past the rows with CP",
       [](Spec& s) {
         s.T = 3;
         s.cu = {0, 4, 8};
         s.cp_size = 2;
       },
       kStatusBadCuSeqlens, all_rows(3)},
      {"cu_seqlens INT32_MIN .. INT32_MAX",
       [](Spec& s) {
         s.cu = {kI32Min, 0, kI32Max};
       },
       kStatusBadCuSeqlens, all_rows(6)},
      {"cu_seqlens near INT32_MAX, packed",
       [](Spec& s) {
         s.cu = {kI32Max - 6, kI32Max - 3, kI32Max};
         s.freq_mode = FreqMode::packed;
       },
       kStatusRowOutsideTable, all_rows(6)},
      {"packed near INT32_MAX with INT32_MIN offsets",
       [](Spec& s) {
         s.cu = {kI32Max - 6, kI32Max - 3, kI32Max};
         s.freq_mode = FreqMode::packed;
         s.has_seq_offsets = true;
         s.seq_offsets = {kI32Min, kI32Min};  // rows -7 .. -1
       },
       kStatusRowOutsideTable, all_rows(6)},
      {"position_ids beyond the table, negative, INT32_MAX",
       [](Spec& s) {
         s.cu = {0, 3, 6};
         s.has_position_ids = true;
         s.position_ids = {0, 8, -1, 2, 7, kI32Max};
       },
       kStatusRowOutsideTable,
       {1, 2, 5}},
      {"position_ids INT32_MIN",
       [](Spec& s) {
         s.cu = {0, 3, 6};
         s.has_position_ids = true;
         s.position_ids = {kI32Min, 1, 2, 3, 4, 5};
       },
       kStatusRowOutsideTable,
       {0}},
      {"int64 position_ids beyond the table",
       [](Spec& s) {
         s.cu = {0, 3, 6};
         s.has_position_ids = true;
         s.position_ids_type = IndexType::i64;
         s.position_ids = {kI64Max, 1, kI64Min, std::int64_t{1} << 32, 7, -(std::int64_t{1} << 32)};
       },
       kStatusRowOutsideTable,
       {0, 2, 3, 5}},
      {"padding rows ignore their bad position_ids",
       [](Spec& s) {
         s.cu = {0, 2, 4};
         s.has_position_ids = true;
         s.position_ids = {1, 2, 3, 4, -5, kI32Max};  // rows 4, 5 are padding
       },
       kStatusOk,
       {4, 5}},
      {"negative seq_offsets",
       [](Spec& s) {
         s.cu = {0, 3, 6};
         s.has_seq_offsets = true;
         s.seq_offsets = {0, -2};  // sequence 1: rows -2, -1, 0
       },
       kStatusRowOutsideTable,
       {3, 4}},
      {"seq_offsets INT32_MAX",
       [](Spec& s) {
         s.cu = {0, 3, 6};
         s.has_seq_offsets = true;
         s.seq_offsets = {kI32Max, 0};
       },
       kStatusRowOutsideTable,
       {0, 1, 2}},
      {"SBHD seq_offsets before and past the table",
       [](Spec& s) {
         s.layout = TokenLayout::sbhd;
         s.S = 3;
         s.table_rows = 4;
         s.has_seq_offsets = true;
         s.seq_offsets = {-1, 2};  // rows [-1, 0, 1] and [2, 3, 4]; row = s * 2 + b
       },
       kStatusRowOutsideTable,
       {0, 5}},
      {"SBHD seq_offsets INT32_MIN and INT32_MAX with CP",
       [](Spec& s) {
         s.layout = TokenLayout::sbhd;
         s.cp_size = 2;
         s.cp_rank = 1;
         s.has_seq_offsets = true;
         s.seq_offsets = {kI32Min, kI32Max};
       },
       kStatusRowOutsideTable, all_rows(8)},
  };
  for (const NamedCase& c : cases)
    for (EntryPoint op : all_entry_points())
      for (DeviceStatus initial : {kStatusOk, kStatusBadSeqLength}) {
        Spec s;
        s.op = op;
        s.layout = TokenLayout::thd;
        s.initial_status = initial;
        c.edit(s);
        Built b;
        build(b, s);
        SCOPED_TRACE(std::string(c.name) + ": " + trace(s));
        expect_metadata_outcome(runner(), b, &c.expected, &c.passed);
      }
}

// A random value of the kinds that break metadata: small, negative, near the table, extremes.
std::int64_t garbage(test::Rng& rng, std::int64_t table_rows, bool wide) {
  switch (rng.next() % 10) {
    case 0: return -1 - static_cast<std::int64_t>(rng.next() % 4);
    case 1: return table_rows + static_cast<std::int64_t>(rng.next() % 3) - 1;
    case 2: return (rng.next() & 1) ? kI32Max : kI32Min;
    case 3:
      if (wide) return (rng.next() & 1) ? kI64Max : kI64Min;
      return kI32Max - static_cast<std::int64_t>(rng.next() % 8);
    default:
      return static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(table_rows + 1));
  }
}

Spec random_thd_spec(std::uint64_t seed) {
  test::Rng rng(seed * 7919 + 17);
  Spec s;
  s.seed = seed;
  s.op = all_entry_points()[seed % 6];
  s.layout = TokenLayout::thd;
  s.T = static_cast<std::int64_t>(rng.next() % 13);
  s.H = 1 + static_cast<std::int64_t>(rng.next() % 3);
  s.nope = static_cast<std::int64_t>(rng.next() % 3);
  s.emb = 2 * (1 + static_cast<std::int64_t>(rng.next() % 3));
  s.k = static_cast<std::int64_t>(rng.next() % 3);
  s.v = 1 + static_cast<std::int64_t>(rng.next() % 3);
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  s.act = types[rng.next() % 3];
  s.table_dtype = types[rng.next() % 3];
  s.pad = static_cast<std::int64_t>(rng.next() % 3);
  s.table_rows = 1 + static_cast<std::int64_t>(rng.next() % 24);
  const std::int64_t cps[] = {1, 2, 4};
  s.cp_size = cps[rng.next() % 3];
  s.cp_rank = static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(s.cp_size));
  s.freq_mode = (rng.next() & 1) ? FreqMode::packed : FreqMode::per_sequence;
  s.layouts = test::all_triples()[rng.next() % 8];
  s.inverse = rng.next() & 1;
  if (rng.next() % 4 == 0) s.initial_status = static_cast<DeviceStatus>(rng.next() % 8);
  const std::int64_t n = static_cast<std::int64_t>(rng.next() % 5);
  s.cu.assign(1, 0);
  const std::uint64_t kind = rng.next() % 7;
  if (kind == 1) s.cu[0] = static_cast<std::int64_t>(rng.next() % 20);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t unit = 2 * s.cp_size;
    std::int64_t next = 0;
    switch (kind) {
      case 0:
      case 1:  // valid lengths (the total may or may not fit in T)
        next = s.cu.back() + unit * static_cast<std::int64_t>(rng.next() % 3);
        break;
      case 2:  // arbitrary small values
        next = static_cast<std::int64_t>(rng.next() % 40) - 10;
        break;
      case 3:  // decreasing somewhere
        next = s.cu.back() + (i == n / 2 ? -unit : unit);
        break;
      case 4:  // lengths not divisible by 2 * cp_size (when cp_size > 1)
        next = s.cu.back() + 1 + static_cast<std::int64_t>(rng.next() % 5);
        break;
      case 5:  // extremes
        next = (rng.next() & 1) ? kI32Max : kI32Min;
        break;
      default:  // valid lengths, total past the rows
        next = s.cu.back() + unit * (s.T + 1);
        break;
    }
    s.cu.push_back(std::max<std::int64_t>(kI32Min, std::min<std::int64_t>(kI32Max, next)));
  }
  if (rng.next() % 3 == 0) {
    s.has_position_ids = true;
    s.position_ids_type = (rng.next() & 1) ? IndexType::i64 : IndexType::i32;
    for (std::int64_t r = 0; r < s.T; ++r)
      s.position_ids.push_back(garbage(rng, s.table_rows, s.position_ids_type == IndexType::i64));
  }
  if (rng.next() % 3 == 0) {
    s.has_seq_offsets = true;
    for (std::int64_t i = 0; i < n; ++i)
      s.seq_offsets.push_back(rng.next() % 3 == 0 ? garbage(rng, s.table_rows, false)
                                                  : static_cast<std::int64_t>(rng.next() % 9) - 4);
  }
  return s;
}

Spec random_sbhd_spec(std::uint64_t seed) {
  test::Rng rng(seed * 104729 + 5);
  Spec s = random_thd_spec(seed);  // dims, dtypes, layouts
  s.layout = TokenLayout::sbhd;
  s.freq_mode = FreqMode::per_sequence;
  s.has_position_ids = false;
  s.position_ids.clear();
  s.S = (s.cp_size > 1 ? 2 : 1) * static_cast<std::int64_t>(rng.next() % 4);
  s.B = 1 + static_cast<std::int64_t>(rng.next() % 3);
  s.has_seq_offsets = rng.next() % 4 != 0;
  s.seq_offsets.clear();
  if (s.has_seq_offsets) {
    for (std::int64_t b = 0; b < s.B; ++b)
      s.seq_offsets.push_back(rng.next() % 3 == 0 ? garbage(rng, s.table_rows, false)
                                                  : static_cast<std::int64_t>(rng.next() % 9) - 4);
  } else {
    s.table_rows = std::max<std::int64_t>(s.table_rows, s.S * s.cp_size);  // the host-known rule
  }
  return s;
}

TEST_P(GarbageMetadata, RandomThdMetadata) {
  DeviceStatus seen = kStatusOk;
  for (std::uint64_t seed = 0; seed < 3000; ++seed) {
    const Spec s = random_thd_spec(seed);
    Built b;
    build(b, s);
    seen |= check_device_metadata(b.positions(), b.row_shape(), s.table_rows);
    SCOPED_TRACE(trace(s));
    expect_metadata_outcome(runner(), b, nullptr, nullptr);
    if (HasFailure()) break;  // one seed's report is enough
  }
  EXPECT_EQ(seen, kStatusBadCuSeqlens | kStatusBadSeqLength | kStatusRowOutsideTable)
      << "the generator misses a kind of error";
}

TEST_P(GarbageMetadata, RandomSbhdSeqOffsets) {
  DeviceStatus seen = kStatusOk;
  for (std::uint64_t seed = 0; seed < 1200; ++seed) {
    const Spec s = random_sbhd_spec(seed);
    Built b;
    build(b, s);
    seen |= check_device_metadata(b.positions(), b.row_shape(), s.table_rows);
    SCOPED_TRACE(trace(s));
    expect_metadata_outcome(runner(), b, nullptr, nullptr);
    if (HasFailure()) break;
  }
  EXPECT_EQ(seen, kStatusRowOutsideTable);
}

std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

// The CUDA runner copies device memory back after every call, whether the call threw or not:
// a failed copy during the unwinding of a rejected call must not end the process.
TEST(RunThenFinish, BothThrowingGivesOneErrorNamingBoth) {
  bool finished = false;
  try {
    run_then_finish([] { throw Error("t: rejected"); },
                    [&] {
                      finished = true;
                      throw std::runtime_error("copy back failed");
                    });
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t: rejected"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("copy back failed"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(finished);
}

TEST(RunThenFinish, FinishRunsOnceEitherWay) {
  int finishes = 0;
  EXPECT_THROW(run_then_finish([] { throw Error("rejected"); }, [&] { ++finishes; }), Error);
  EXPECT_EQ(finishes, 1);
  run_then_finish([] {}, [&] { ++finishes; });
  EXPECT_EQ(finishes, 2);
  EXPECT_THROW(run_then_finish([] {}, [] { throw std::runtime_error("copy back failed"); }),
               std::runtime_error);
}

INSTANTIATE_TEST_SUITE_P(Backends, BadInput, ::testing::Values("reference", "host", "cuda"),
                         backend_param_name);
INSTANTIATE_TEST_SUITE_P(Backends, GarbageMetadata, ::testing::Values("reference", "host", "cuda"),
                         backend_param_name);

}  // namespace
}  // namespace mlarope::bad_input
