// SPDX-License-Identifier: Apache-2.0
// Identities the backend under test must satisfy, each between two calls of the backend: round
// trip, adjoint, in place == out of place, SBHD B = 1 == THD with one sequence, SBHD CP ==
// Megatron's host-sliced table, the CP ranks cover every position once, explicit position ids
// == the implicit mapping, MLA + remove-interleaving == GPT-J on a pairwise-repeated table,
// graph replay, immutability, order independence.
#include <algorithm>
#include <cstring>
#include <map>

#include "backends/case_run.h"
#include "checks/strided_call.h"
#include "checks/value_compare.h"
#include "host_convert.h"
#include "positions.h"
#include "property_support.h"

using namespace mlarope;
using namespace mlarope::props;
using harness::Case;
using harness::CaseOutputs;
using harness::CheckKind;

namespace {

const harness::Backend& backend() { return backend_under_test(); }

// `c` on the backend, laid out by the spec's plan; the property fails (and writes the case) when
// the backend throws or the audit finds anything.
CaseOutputs run(const CaseSpec& spec, const Case& c) {
  const harness::RunResult r = harness::run_strided(c, backend(), spec.plan, c.config.in_place);
  if (!r.error.empty()) fail_with_case(spec, c, "the backend threw: " + r.error);
  if (!r.findings.empty())
    fail_with_case(spec, c,
                   std::string(to_string(r.findings[0].check)) + ": " + r.findings[0].message);
  return r.outputs;
}

// `got` must agree with `expected` (outputs of `c`) within twice the tolerance model.
void require_agree(const CaseSpec& spec, const Case& c, const CaseOutputs& got,
                   const CaseOutputs& expected, const std::string& what) {
  const harness::CheckResult r =
      harness::compare_outputs(c, harness::value_context(c), got, expected, CheckKind::value, 2.0,
                               nullptr, what + ": ");
  if (!r.ok()) fail_with_case(spec, c, r.message);
}

npy::Array int32_array(const std::vector<std::int64_t>& v) {
  npy::Array a = npy::make(npy::Dtype::i32, {static_cast<std::int64_t>(v.size())});
  for (std::size_t i = 0; i < v.size(); ++i)
    a.data<std::int32_t>()[i] = static_cast<std::int32_t>(v[i]);
  return a;
}

// Drop dim 1 (B = 1) of every [S, 1, H, D] activation.
void squeeze_batch(std::map<std::string, npy::Array>& arrays) {
  for (auto& [name, a] : arrays)
    if (a.shape.size() == 4 && name != "cos" && name != "sin") a.shape.erase(a.shape.begin() + 1);
}

// Megatron's host slicing for CP: chunks r and 2 cp - 1 - r of S / 2 rows each.
npy::Array slice_table(const npy::Array& table, std::int64_t s, std::int64_t cp,
                       std::int64_t rank) {
  npy::Array out = table;
  out.shape[0] = s;
  const std::size_t row =
      table.bytes.size() / static_cast<std::size_t>(std::max<std::int64_t>(table.shape[0], 1));
  out.bytes.resize(row * static_cast<std::size_t>(s));
  const std::int64_t half = s / 2;
  for (std::int64_t i = 0; i < s; ++i) {
    const std::int64_t source =
        i < half ? rank * half + i : (2 * cp - 1 - rank) * half + (i - half);
    std::memcpy(&out.bytes[i * row], &table.bytes[source * row], row);
  }
  return out;
}

// The GPT-J (interleaved) table of a half table: entry 2i = entry i, entry 2i + 1 = entry i + d/2.
npy::Array interleave_table(const npy::Array& table, std::int64_t d) {
  npy::Array out = table;
  const std::size_t es = npy::dtype_size(table.dtype);
  for (std::int64_t r = 0; r < table.size() / d; ++r)
    for (std::int64_t i = 0; i < d / 2; ++i) {
      std::memcpy(&out.bytes[(r * d + 2 * i) * es], &table.bytes[(r * d + i) * es], es);
      std::memcpy(&out.bytes[(r * d + 2 * i + 1) * es], &table.bytes[(r * d + i + d / 2) * es], es);
    }
  return out;
}

// A case whose output reveals each row's freq_row: cos[p] = p + 2, sin = 0, every pair (1, 0).
Case position_probe(Case c, const CaseSpec& s) {
  for (const char* name : {"cos", "sin"}) {
    npy::Array& t = c.arrays.at(name);
    for (std::int64_t i = 0; i < t.size(); ++i) {
      const std::int64_t position = i / s.emb_dim;  // the table row of element i
      t.data<float>()[i] = name[0] == 'c' ? static_cast<float>(position + 2) : 0.0f;
    }
  }
  npy::Array& x = c.arrays.at("t");
  std::fill(x.data<float>(), x.data<float>() + x.size(), 0.0f);
  const std::int64_t width = s.nope_dim + s.emb_dim;
  for (std::int64_t head = 0; head < x.size() / width; ++head)
    for (std::int64_t i = 0; i < s.emb_dim / 2; ++i)
      x.data<float>()[head * width + s.nope_dim + (s.in_layout == PairLayout::half ? i : 2 * i)] =
          1.0f;
  return c;
}

// The freq_row a probe output shows for `row`, or a failure when its heads and pairs disagree.
std::int64_t probed_row(const CaseSpec& s, const Case& c, const npy::Array& out, std::int64_t row) {
  const std::int64_t width = s.nope_dim + s.emb_dim;
  std::int64_t found = -1000;
  for (std::int64_t h = 0; h < s.heads; ++h)
    for (std::int64_t i = 0; i < s.emb_dim / 2; ++i) {
      const std::int64_t k = s.nope_dim + (s.out_layout == PairLayout::half ? i : 2 * i);
      const auto p =
          static_cast<std::int64_t>(out.data<float>()[(row * s.heads + h) * width + k]) - 2;
      if (found != -1000 && p != found)
        fail_with_case(s, c,
                       "row " + std::to_string(row) + ": heads or pairs use different table rows");
      found = p;
    }
  return found;
}

// Global positions each sequence (SBHD: batch entry) should cover across all CP ranks.
std::map<std::int64_t, std::vector<std::int64_t>> every_position(const CaseSpec& s) {
  std::map<std::int64_t, std::vector<std::int64_t>> want;
  if (s.layout == TokenLayout::sbhd) {
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t p = 0; p < s.seq * s.cp_size; ++p) want[b].push_back(p);
    return want;
  }
  std::int64_t start = 0;
  for (std::size_t i = 0; i < s.seq_lengths.size(); ++i) {
    const std::int64_t base = s.freq_mode == FreqMode::packed ? start : 0;
    for (std::int64_t p = 0; p < s.seq_lengths[i]; ++p)
      want[static_cast<std::int64_t>(i)].push_back(base + p);
    start += s.seq_lengths[i];
  }
  return want;
}

// Positions rank `spec.cp_rank` uses, by sequence (SBHD: batch entry).
void collect_positions(const CaseSpec& s, const Case& c, const npy::Array& out,
                       std::map<std::int64_t, std::vector<std::int64_t>>& seen) {
  if (s.layout == TokenLayout::sbhd) {
    for (std::int64_t row = 0; row < s.seq * s.batch; ++row)
      seen[row % s.batch].push_back(probed_row(s, c, out, row));
    return;
  }
  std::int64_t row = 0;
  for (std::size_t i = 0; i < s.seq_lengths.size(); ++i)
    for (std::int64_t lp = 0; lp < s.seq_lengths[i] / s.cp_size; ++lp)
      seen[static_cast<std::int64_t>(i)].push_back(probed_row(s, c, out, row++));
}

GenOptions no_metadata_surprises() {
  GenOptions o;
  o.seq_offsets = false;
  o.position_ids = false;
  o.faults = false;
  return o;
}

}  // namespace

MLAROPE_PROPERTY(IdentitiesProps, RoundTripGivesMSquaredX, kCasesPerIdentity) {
  GenOptions o;
  o.ops = {Op::rope, Op::rope_backward};
  o.table_kinds = {TableKind::unit, TableKind::mscale};
  require_case_passes(*case_spec(o), {CheckKind::round_trip});
}

MLAROPE_PROPERTY(IdentitiesProps, AdjointHoldsForEveryOp, kCasesPerIdentity) {
  require_case_passes(*case_spec(), {CheckKind::adjoint});
}

MLAROPE_PROPERTY(IdentitiesProps, InPlaceEqualsOutOfPlace, kCasesPerIdentity) {
  GenOptions o;
  o.ops = {Op::rope, Op::rope_backward};
  require_case_passes(*case_spec(o), {CheckKind::in_place});
}

MLAROPE_PROPERTY(IdentitiesProps, InputsAndNopePartsAreImmutable, kCasesPerIdentity) {
  require_case_passes(*case_spec(),
                      {CheckKind::immutability, CheckKind::bounds, CheckKind::coverage});
}

MLAROPE_PROPERTY(IdentitiesProps, SbhdBatchOneIsThdWithOneSequence, kCasesPerIdentity) {
  GenOptions o;
  o.layouts = {TokenLayout::sbhd};
  o.batch_one = true;
  const CaseSpec spec = *case_spec(o);
  const Case sbhd = materialize(spec);
  Case thd = sbhd;
  thd.config.layout = TokenLayout::thd;
  thd.config.freq_mode = FreqMode::per_sequence;
  thd.config.max_seqlen = 0;
  squeeze_batch(thd.arrays);
  thd.arrays["cu_seqlens"] = int32_array({0, spec.seq * spec.cp_size});
  thd.config.inputs["cu_seqlens"] = "cu_seqlens.npy";
  CaseOutputs from_sbhd = run(spec, sbhd);
  squeeze_batch(from_sbhd.arrays);
  require_agree(spec, thd, run(spec, thd), from_sbhd, "THD with one sequence vs SBHD with B = 1");
}

MLAROPE_PROPERTY(IdentitiesProps, SbhdCpMatchesHostSlicedTable, kCasesPerIdentity) {
  GenOptions o = no_metadata_surprises();
  o.layouts = {TokenLayout::sbhd};
  o.cp_sizes = {2, 3, 4, 8};
  const CaseSpec spec = *case_spec(o);
  const Case with_cp = materialize(spec);
  Case sliced = with_cp;
  sliced.config.cp_size = 1;
  sliced.config.cp_rank = 0;
  const std::int64_t rows = spec.batch == 0 ? 0 : spec.seq;  // B = 0: the table is empty
  for (const char* name : {"cos", "sin"})
    sliced.arrays[name] = slice_table(with_cp.arrays.at(name), rows, spec.cp_size, spec.cp_rank);
  require_agree(spec, sliced, run(spec, sliced), run(spec, with_cp),
                "host-sliced table without CP vs CP mapping");
}

MLAROPE_PROPERTY(IdentitiesProps, CpRanksCoverEveryPositionOnce, kCasesPerIdentity) {
  GenOptions o = no_metadata_surprises();
  o.ops = {Op::rope};
  o.cp_sizes = {2, 3, 4, 8};
  o.in_place = false;
  o.min_heads = 1;
  const CaseSpec spec = *rc::gen::map(case_spec(o), [](CaseSpec s) {
    s.dtype = s.table_dtype = DType::f32;
    s.values = Values::normal;
    s.plan.broadcast_heads = false;
    return s;
  });
  std::map<std::int64_t, std::vector<std::int64_t>> seen;
  Case probe;
  for (std::int64_t rank = 0; rank < spec.cp_size; ++rank) {
    CaseSpec at_rank = spec;
    at_rank.cp_rank = rank;
    probe = position_probe(materialize(at_rank), at_rank);
    collect_positions(at_rank, probe, run(at_rank, probe).arrays.at("out"), seen);
  }
  for (auto& [sequence, positions] : seen) std::sort(positions.begin(), positions.end());
  for (auto& [sequence, positions] : every_position(spec))
    if (seen[sequence] != positions)
      fail_with_case(spec, probe,
                     "sequence " + std::to_string(sequence) + ": the CP ranks together use " +
                         std::to_string(seen[sequence].size()) + " positions, not every one of " +
                         std::to_string(positions.size()) + " exactly once");
}

MLAROPE_PROPERTY(IdentitiesProps, ExplicitPositionIdsEqualTheImplicitMapping, kCasesPerIdentity) {
  GenOptions o = no_metadata_surprises();
  o.layouts = {TokenLayout::thd};
  const CaseSpec spec = *case_spec(o);
  const Case implicit = materialize(spec);
  const std::int64_t rows = row_count(spec);
  const reference::RowMap map =
      reference::map_rows(harness::positions_of(implicit), {rows, 1}, table_rows(spec));
  npy::Array ids =
      npy::make(spec.position_ids_type == IndexType::i64 ? npy::Dtype::i64 : npy::Dtype::i32,
                {rows});
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t id = std::max<std::int64_t>(map.freq_row[r], 0);
    if (ids.dtype == npy::Dtype::i64) ids.data<std::int64_t>()[r] = id;
    else ids.data<std::int32_t>()[r] = static_cast<std::int32_t>(id);
  }
  Case explicit_ids = implicit;
  explicit_ids.arrays["position_ids"] = ids;
  explicit_ids.config.inputs["position_ids"] = "position_ids.npy";
  require_agree(spec, explicit_ids, run(spec, explicit_ids), run(spec, implicit),
                "explicit position_ids vs the implicit mapping");
}

MLAROPE_PROPERTY(IdentitiesProps, MlaRemoveInterleavingEqualsGptJ, kCasesPerIdentity) {
  GenOptions o;
  o.triple = LayoutTriple{PairLayout::interleaved, PairLayout::interleaved, PairLayout::half};
  const CaseSpec spec = *case_spec(o);
  const Case mla = materialize(spec);
  Case gptj = mla;
  gptj.config.table_layout = PairLayout::interleaved;
  for (const char* name : {"cos", "sin"})
    gptj.arrays[name] = interleave_table(mla.arrays.at(name), spec.emb_dim);
  require_agree(spec, gptj, run(spec, gptj), run(spec, mla),
                "GPT-J mode (interleaved table) vs MLA + remove interleaving (half table)");
}

TEST(IdentitiesProps, GraphReplayReadsNewMetadataAndInputs) {
  if (!backend().capture) GTEST_SKIP() << "backend " << backend().name << " has no capture";
  check_property(kCasesPerIdentity,
                 [] { require_case_passes(*case_spec(), {CheckKind::graph_replay}); });
}

TEST(IdentitiesProps, OrderOfThreadsAndBlocksDoesNotMatter) {
  if (!backend().with_order_seed)
    GTEST_SKIP() << "backend " << backend().name << " has no with_order_seed";
  check_property(kCasesPerIdentity,
                 [] { require_case_passes(*case_spec(), {CheckKind::order_independence}); });
}
