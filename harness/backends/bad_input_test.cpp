// SPDX-License-Identifier: Apache-2.0
// The bad input suite (docs/semantics.md §5) on every backend: each host-known validity rule, for
// every op, gives an mlarope::Error naming the argument and leaves every byte of memory (inputs,
// outputs, gaps, guards, status word) untouched; zero-size calls are no-ops. Garbage device
// metadata has its own suite (garbage_metadata_test.cpp) over the same builder.
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

class BadInput : public BackendTest {};

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

}  // namespace
}  // namespace mlarope::bad_input
