// SPDX-License-Identifier: Apache-2.0
// CaseSpec: names, derived sizes, printing and JSON. materialize() is in case_data.cpp.
#include "fuzz/case_spec.h"

#include <algorithm>
#include <numeric>
#include <ostream>
#include <sstream>

#include "mlarope/error.h"

namespace mlarope::props {
namespace {

constexpr std::int64_t kMaxOffset = 8;  // seq_offsets are drawn from [0, kMaxOffset]

template <class E, std::size_t N>
E parse_enum(const std::string& s, const E (&values)[N], const char* what) {
  for (E v : values)
    if (to_string(v) == s) return v;
  throw Error(std::string("spec.json: ") + what + " = '" + s + "' is unknown");
}

constexpr TableKind kTableKinds[] = {TableKind::unit, TableKind::mscale, TableKind::random};
constexpr Values kValues[] = {Values::normal,       Values::large,      Values::tiny,
                              Values::signed_zeros, Values::cancelling, Values::ties,
                              Values::nan_payloads};
constexpr MetadataFault kFaults[] = {MetadataFault::none, MetadataFault::bad_length,
                                     MetadataFault::decreasing, MetadataFault::too_long,
                                     MetadataFault::row_outside_table};

}  // namespace

std::string_view to_string(TableKind kind) {
  switch (kind) {
    case TableKind::unit: return "unit";
    case TableKind::mscale: return "mscale";
    case TableKind::random: return "random";
  }
  return "?";
}

std::string_view to_string(Values values) {
  switch (values) {
    case Values::normal: return "normal";
    case Values::large: return "large";
    case Values::tiny: return "tiny";
    case Values::signed_zeros: return "signed_zeros";
    case Values::cancelling: return "cancelling";
    case Values::ties: return "ties";
    case Values::nan_payloads: return "nan_payloads";
  }
  return "?";
}

std::string_view to_string(MetadataFault fault) {
  switch (fault) {
    case MetadataFault::none: return "none";
    case MetadataFault::bad_length: return "bad_length";
    case MetadataFault::decreasing: return "decreasing";
    case MetadataFault::too_long: return "too_long";
    case MetadataFault::row_outside_table: return "row_outside_table";
  }
  return "?";
}

std::int64_t row_count(const CaseSpec& s) {
  if (s.layout == TokenLayout::sbhd) return s.seq * s.batch;
  std::int64_t rows = s.padding_rows;
  for (std::int64_t length : s.seq_lengths) rows += length / s.cp_size;
  return rows;
}

std::int64_t longest_sequence(const CaseSpec& s) {
  if (s.layout == TokenLayout::sbhd) return s.seq * s.cp_size;
  std::int64_t longest = 0;
  for (std::int64_t length : s.seq_lengths) longest = std::max(longest, length);
  return longest;
}

std::int64_t table_rows(const CaseSpec& s) {
  std::int64_t needed = 0;
  if (s.layout == TokenLayout::sbhd) {
    if (s.seq > 0 && s.batch > 0)
      needed = s.cp_size == 1 ? s.seq : s.seq * s.cp_size - s.cp_rank * (s.seq / 2);
  } else if (s.position_ids) {
    needed = std::max<std::int64_t>(1, longest_sequence(s));
  } else if (s.freq_mode == FreqMode::packed) {
    needed = std::accumulate(s.seq_lengths.begin(), s.seq_lengths.end(), std::int64_t{0});
  } else {
    needed = longest_sequence(s);
  }
  if (s.seq_offsets) needed += kMaxOffset;
  return needed + s.extra_table_rows;
}

harness::CheckOptions check_options(const CaseSpec& s) {
  harness::CheckOptions o;
  o.layout = s.plan;
  o.seed = s.data_seed * 0x9E3779B97F4A7C15ull + 1;
  return o;
}

std::string describe(const CaseSpec& s) {
  std::ostringstream o;
  o << to_string(s.op) << " " << to_string(s.layout) << " " << to_string(s.dtype)
    << " H=" << s.heads;
  if (s.op == Op::rope || s.op == Op::rope_backward) o << " nope=" << s.nope_dim;
  else o << " k=" << s.k_dim << " v=" << s.v_dim;
  o << " emb=" << s.emb_dim;
  if (s.layout == TokenLayout::sbhd) {
    o << " S=" << s.seq << " B=" << s.batch;
  } else {
    o << " seqs=[";
    for (std::size_t i = 0; i < s.seq_lengths.size(); ++i) o << (i ? "," : "") << s.seq_lengths[i];
    o << "]+" << s.padding_rows << " " << to_string(s.freq_mode);
    if (!s.max_seqlen_known) o << " max_seqlen=?";
  }
  if (s.cp_size > 1) o << " cp=" << s.cp_rank << "/" << s.cp_size;
  if (s.position_ids) o << " ids=" << to_string(s.position_ids_type);
  if (s.seq_offsets) o << " offsets";
  if (s.fault != MetadataFault::none) o << " fault=" << to_string(s.fault);
  o << " " << to_string(s.in_layout) << "/" << to_string(s.out_layout) << "/"
    << to_string(s.table_layout);
  if (s.inverse) o << " inverse";
  if (s.in_place) o << " in_place";
  o << " table=" << to_string(s.table_kind) << ":" << to_string(s.table_dtype) << "x"
    << table_rows(s);
  if (s.table_kind == TableKind::mscale) o << " m=" << s.mscale;
  o << " values=" << to_string(s.values);
  const harness::LayoutPlan& p = s.plan;
  if (p.head_gap || p.row_gap || p.table_gap)
    o << " gaps=" << p.head_gap << "/" << p.row_gap << "/" << p.table_gap;
  if (p.misalign) o << " misaligned";
  if (p.broadcast_heads) o << " broadcast";
  o << " seed=" << s.data_seed;
  return o.str();
}

void showValue(const CaseSpec& s, std::ostream& os) { os << describe(s); }

nlohmann::json to_json(const CaseSpec& s) {
  return {{"op", to_string(s.op)},
          {"layout", to_string(s.layout)},
          {"dtype", to_string(s.dtype)},
          {"table_dtype", to_string(s.table_dtype)},
          {"heads", s.heads},
          {"nope_dim", s.nope_dim},
          {"emb_dim", s.emb_dim},
          {"k_dim", s.k_dim},
          {"v_dim", s.v_dim},
          {"seq", s.seq},
          {"batch", s.batch},
          {"seq_lengths", s.seq_lengths},
          {"padding_rows", s.padding_rows},
          {"cp_size", s.cp_size},
          {"cp_rank", s.cp_rank},
          {"freq_mode", to_string(s.freq_mode)},
          {"position_ids", s.position_ids},
          {"position_ids_type", to_string(s.position_ids_type)},
          {"seq_offsets", s.seq_offsets},
          {"max_seqlen_known", s.max_seqlen_known},
          {"fault", to_string(s.fault)},
          {"extra_table_rows", s.extra_table_rows},
          {"table_rank4", s.table_rank4},
          {"in_layout", to_string(s.in_layout)},
          {"out_layout", to_string(s.out_layout)},
          {"table_layout", to_string(s.table_layout)},
          {"inverse", s.inverse},
          {"in_place", s.in_place},
          {"table_kind", to_string(s.table_kind)},
          {"mscale", s.mscale},
          {"yarn_scaling", s.yarn_scaling},
          {"table_offset", s.table_offset},
          {"values", to_string(s.values)},
          {"plan", harness::to_json(s.plan)},
          {"data_seed", s.data_seed},
          {"description", describe(s)}};
}

CaseSpec spec_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("spec.json: expected a JSON object");
  CaseSpec s;
  try {
    harness::CaseConfig k = harness::parse_config({{"op", j.at("op")},
                                                   {"layout", j.at("layout")},
                                                   {"dtype", j.at("dtype")},
                                                   {"table_dtype", j.at("table_dtype")},
                                                   {"in_layout", j.at("in_layout")},
                                                   {"out_layout", j.at("out_layout")},
                                                   {"table_layout", j.at("table_layout")},
                                                   {"freq_mode", j.at("freq_mode")},
                                                   {"emb_dim", j.at("emb_dim")},
                                                   {"nope_dim", j.at("nope_dim")},
                                                   {"k_dim", j.at("k_dim")},
                                                   {"v_dim", j.at("v_dim")},
                                                   {"inputs", nlohmann::json::object()}},
                                                  "spec.json");
    s.op = k.op, s.layout = k.layout, s.dtype = k.dtype, s.table_dtype = k.table_dtype;
    s.in_layout = k.in_layout, s.out_layout = k.out_layout, s.table_layout = k.table_layout;
    s.freq_mode = k.freq_mode, s.emb_dim = k.emb_dim, s.nope_dim = k.nope_dim;
    s.k_dim = k.k_dim, s.v_dim = k.v_dim;
    j.at("heads").get_to(s.heads);
    j.at("seq").get_to(s.seq);
    j.at("batch").get_to(s.batch);
    j.at("seq_lengths").get_to(s.seq_lengths);
    j.at("padding_rows").get_to(s.padding_rows);
    j.at("cp_size").get_to(s.cp_size);
    j.at("cp_rank").get_to(s.cp_rank);
    j.at("position_ids").get_to(s.position_ids);
    s.position_ids_type =
        j.at("position_ids_type").get<std::string>() == "i64" ? IndexType::i64 : IndexType::i32;
    j.at("seq_offsets").get_to(s.seq_offsets);
    j.at("max_seqlen_known").get_to(s.max_seqlen_known);
    s.fault = parse_enum(j.at("fault").get<std::string>(), kFaults, "fault");
    j.at("extra_table_rows").get_to(s.extra_table_rows);
    j.at("table_rank4").get_to(s.table_rank4);
    j.at("inverse").get_to(s.inverse);
    j.at("in_place").get_to(s.in_place);
    s.table_kind = parse_enum(j.at("table_kind").get<std::string>(), kTableKinds, "table_kind");
    j.at("mscale").get_to(s.mscale);
    j.at("yarn_scaling").get_to(s.yarn_scaling);
    j.at("table_offset").get_to(s.table_offset);
    s.values = parse_enum(j.at("values").get<std::string>(), kValues, "values");
    s.plan = harness::layout_plan_from_json(j.at("plan"));
    j.at("data_seed").get_to(s.data_seed);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("spec.json: ") + e.what());
  }
  return s;
}

}  // namespace mlarope::props
