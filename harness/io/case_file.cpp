// SPDX-License-Identifier: Apache-2.0
#include "io/case_file.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <vector>

#include "mlarope/error.h"
#include "mlarope/op_schema.h"
#include "mlarope/validate.h"
#include "reference.h"

namespace mlarope::harness {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const json& require(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw Error(where + ": missing key '" + key + "'");
  return j.at(key);
}

std::string get_string(const json& j, const char* key, const std::string& where) {
  const json& v = require(j, key, where);
  if (!v.is_string()) throw Error(where + ": '" + key + "' must be a string, got " + v.dump());
  return v.get<std::string>();
}

std::int64_t get_int(const json& j, const char* key, const std::string& where,
                     std::int64_t fallback, bool required) {
  if (!j.contains(key)) {
    if (required) throw Error(where + ": missing key '" + key + "'");
    return fallback;
  }
  const json& v = j.at(key);
  if (!v.is_number_integer())
    throw Error(where + ": '" + key + "' must be an integer, got " + v.dump());
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
    throw Error(where + ": '" + key + "' = " + v.dump() + " is beyond a 64-bit signed integer");
  return v.get<std::int64_t>();
}

// A size key (emb_dim, nope_dim, k_dim, v_dim) within the library's bound (check_dim), read
// before any shape is made from it, so that no sum of sizes overflows.
std::int64_t get_dim(const json& j, const char* key, const std::string& where, bool required) {
  const std::int64_t value = get_int(j, key, where, 0, required);
  try {
    check_dim(value, key);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  return value;
}

bool get_bool(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) return false;
  const json& v = j.at(key);
  if (!v.is_boolean())
    throw Error(where + ": '" + key + "' must be true or false, got " + v.dump());
  return v.get<bool>();
}

template <class F>
auto with_where(const std::string& where, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
}

bool is_rope_op(Op op) { return op == Op::rope || op == Op::rope_backward; }

// Rank expected of a named input, given the token layout.
int expected_rank(const std::string& name, TokenLayout layout) {
  if (name == "cu_seqlens" || name == "position_ids" || name == "seq_offsets") return 1;
  return layout == TokenLayout::sbhd ? 4 : 3;
}

void check_array(const std::string& file, const std::string& name, const npy::Array& a,
                 const CaseConfig& c) {
  const bool table = name == "cos" || name == "sin";
  const bool index = name == "cu_seqlens" || name == "position_ids" || name == "seq_offsets";
  if (index) {
    if (a.dtype != npy::Dtype::i32 && a.dtype != npy::Dtype::i64)
      throw Error(file + ": dtype " + std::string(npy::dtype_descr(a.dtype)) +
                  ", expected <i4 or <i8");
  } else {
    const DType want = table ? c.table_dtype : c.dtype;
    if (a.dtype != storage_dtype(want))
      throw Error(file + ": dtype " + std::string(npy::dtype_descr(a.dtype)) +
                  ", but case.json says " + (table ? "table_dtype " : "dtype ") +
                  std::string(to_string(want)) + " (stored as " +
                  std::string(npy::dtype_descr(storage_dtype(want))) + ")");
  }
  const int rank = static_cast<int>(a.shape.size());
  if (table) {
    if (rank != 2 && rank != 4)
      throw Error(file + ": shape " + shape_string(a.shape) +
                  ", expected (R, emb_dim) or (R, 1, 1, emb_dim)");
    if (a.shape.back() != c.emb_dim)
      throw Error(file + ": shape " + shape_string(a.shape) +
                  " does not match emb_dim = " + std::to_string(c.emb_dim) + " from case.json");
    return;
  }
  if (rank != expected_rank(name, c.layout))
    throw Error(file + ": shape " + shape_string(a.shape) + " has rank " + std::to_string(rank) +
                ", expected " + std::to_string(expected_rank(name, c.layout)) + " for layout " +
                std::string(to_string(c.layout)));
  std::int64_t last = -1;
  std::string formula;
  if (name == "t" || name == "grad_out")
    last = c.nope_dim + c.emb_dim, formula = "nope_dim + emb_dim";
  if (name == "kv") last = c.k_dim + c.v_dim, formula = "k_dim + v_dim";
  if (name == "k_pe") last = c.emb_dim, formula = "emb_dim";
  if (name == "grad_key") last = c.k_dim + c.emb_dim, formula = "k_dim + emb_dim";
  if (name == "grad_value") last = c.v_dim, formula = "v_dim";
  if (last >= 0 && a.shape.back() != last)
    throw Error(file + ": shape " + shape_string(a.shape) + ": last dim " +
                std::to_string(a.shape.back()) + " does not match " + formula + " = " +
                std::to_string(last) + " from case.json");
}

}  // namespace

npy::Dtype storage_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return npy::Dtype::f32;
    case DType::f16: return npy::Dtype::f16;
    case DType::bf16: return npy::Dtype::u16;
  }
  return npy::Dtype::f32;
}

// Edit distance between two keys (insertions, deletions, substitutions, adjacent swaps).
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t k = 0; k <= b.size(); ++k) d[0][k] = k;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t k = 1; k <= b.size(); ++k) {
      d[i][k] =
          std::min({d[i - 1][k] + 1, d[i][k - 1] + 1, d[i - 1][k - 1] + (a[i - 1] != b[k - 1])});
      if (i > 1 && k > 1 && a[i - 1] == b[k - 2] && a[i - 2] == b[k - 1])
        d[i][k] = std::min(d[i][k], d[i - 2][k - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// docs/semantics.md §5: an unknown key is an error naming it, with the nearest known key when one
// is close.
void reject_unknown_keys(const json& object, const std::vector<std::string>& known,
                         const std::string& where, const std::string& what) {
  for (const auto& item : object.items()) {
    const std::string& key = item.key();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string nearest;
    std::size_t best = std::max<std::size_t>(2, key.size() / 3) + 1;
    for (const std::string& k : known) {
      const std::size_t distance = edit_distance(key, k);
      if (distance < best) best = distance, nearest = k;
    }
    throw Error(where + ": unknown " + what + " '" + key + "'" +
                (nearest.empty() ? std::string(" (not one of docs/semantics.md §7)")
                                 : " (did you mean '" + nearest + "'?)"));
  }
}

const std::vector<std::string>& case_keys() {
  static const std::vector<std::string> keys = {
      "op",      "layout",    "dtype",      "table_dtype",  "nope_dim", "emb_dim",  "k_dim",
      "v_dim",   "in_layout", "out_layout", "table_layout", "inverse",  "in_place", "cp_size",
      "cp_rank", "freq_mode", "max_seqlen", "inputs",       "yarn"};
  return keys;
}

const std::vector<std::string>& input_names() {
  static const std::vector<std::string> names = {"t",          "grad_out",     "kv",         "k_pe",
                                                 "grad_key",   "grad_value",   "cos",        "sin",
                                                 "cu_seqlens", "position_ids", "seq_offsets"};
  return names;
}

YarnTable parse_yarn(const json& j, const std::string& where) {
  static const std::vector<std::string> keys = {
      "rows",      "offset",    "rotary_base", "scaling_factor", "original_max_position_embeddings",
      "beta_fast", "beta_slow", "mscale",      "mscale_all_dim", "concentration"};
  if (!j.is_object()) throw Error(where + ": 'yarn' must be an object of YaRN parameters");
  reject_unknown_keys(j, keys, where + ": yarn", "key");
  YarnTable y;
  y.rows = get_dim(j, "rows", where + ": yarn", true);
  y.offset = get_int(j, "offset", where + ": yarn", 0, false);
  if (y.rows < 0 || y.offset < 0) throw Error(where + ": yarn: rows and offset must be >= 0");
  auto number = [&](const char* key, double& into) {
    if (!j.contains(key)) return;
    if (!j.at(key).is_number())
      throw Error(where + ": yarn." + key + " must be a number, got " + j.at(key).dump());
    into = j.at(key).get<double>();
  };
  YarnParams& p = y.params;
  number("rotary_base", p.rotary_base);
  number("scaling_factor", p.scaling_factor);
  number("original_max_position_embeddings", p.original_max_position_embeddings);
  number("beta_fast", p.beta_fast);
  number("beta_slow", p.beta_slow);
  number("mscale", p.mscale);
  number("mscale_all_dim", p.mscale_all_dim);
  number("concentration", p.concentration_override);
  return y;
}

json to_json(const YarnTable& y) {
  const YarnParams& p = y.params;
  json j = {{"rows", y.rows},
            {"offset", y.offset},
            {"rotary_base", p.rotary_base},
            {"scaling_factor", p.scaling_factor},
            {"original_max_position_embeddings", p.original_max_position_embeddings},
            {"beta_fast", p.beta_fast},
            {"beta_slow", p.beta_slow},
            {"mscale", p.mscale},
            {"mscale_all_dim", p.mscale_all_dim}};
  if (!std::isnan(p.concentration_override)) j["concentration"] = p.concentration_override;
  return j;
}

std::pair<npy::Array, npy::Array> yarn_arrays(const YarnTable& y, std::int64_t emb_dim, DType dtype,
                                              PairLayout layout) {
  npy::Array cos = npy::make(storage_dtype(dtype), {y.rows, emb_dim}), sin = cos;
  YarnTablesCall call{y.params, y.offset, layout, view_of(cos, dtype), view_of(sin, dtype)};
  reference::yarn_tables(call);
  return {std::move(cos), std::move(sin)};
}

CaseConfig parse_config(const json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": expected a JSON object");
  reject_unknown_keys(j, case_keys(), where, "key");
  CaseConfig c;
  c.op = parse_op(get_string(j, "op", where), where + ": op");
  with_where(where, [&] {
    c.layout = parse_token_layout(get_string(j, "layout", where), "layout");
    c.dtype = parse_dtype(get_string(j, "dtype", where), "dtype");
    c.table_dtype = parse_dtype(get_string(j, "table_dtype", where), "table_dtype");
    c.in_layout = parse_pair_layout(get_string(j, "in_layout", where), "in_layout");
    c.out_layout = parse_pair_layout(get_string(j, "out_layout", where), "out_layout");
    c.table_layout = parse_pair_layout(get_string(j, "table_layout", where), "table_layout");
    if (j.contains("freq_mode")) c.freq_mode = parse_freq_mode(get_string(j, "freq_mode", where));
    return 0;
  });
  const bool rope = is_rope_op(c.op);
  c.emb_dim = get_dim(j, "emb_dim", where, true);
  c.nope_dim = get_dim(j, "nope_dim", where, rope);
  c.k_dim = get_dim(j, "k_dim", where, !rope);
  c.v_dim = get_dim(j, "v_dim", where, !rope);
  c.inverse = get_bool(j, "inverse", where);
  c.in_place = get_bool(j, "in_place", where);
  if (c.in_place && !rope)
    throw Error(where + ": in_place = true, but " + std::string(to_string(c.op)) +
                " has no in-place form");
  c.cp_size = get_int(j, "cp_size", where, 1, false);
  c.cp_rank = get_int(j, "cp_rank", where, 0, false);
  c.max_seqlen = get_int(j, "max_seqlen", where, 0, false);
  const json& inputs = require(j, "inputs", where);
  if (!inputs.is_object()) throw Error(where + ": 'inputs' must be an object of name -> file");
  reject_unknown_keys(inputs, input_names(), where, "input");
  for (const auto& [name, file] : inputs.items()) {
    if (!file.is_string()) throw Error(where + ": inputs." + name + " must be a file name");
    c.inputs[name] = file.get<std::string>();
  }
  if (j.contains("yarn")) {
    c.yarn = parse_yarn(j.at("yarn"), where);
    for (const char* table : {"cos", "sin"})
      if (c.inputs.count(table))
        throw Error(where + ": inputs." + table +
                    " and yarn both given: a case ships its tables or names them, not both");
  }
  return c;
}

json to_json(const CaseConfig& c) {
  json j;
  j["op"] = to_string(c.op);
  j["layout"] = to_string(c.layout);
  j["dtype"] = to_string(c.dtype);
  j["table_dtype"] = to_string(c.table_dtype);
  j["emb_dim"] = c.emb_dim;
  if (is_rope_op(c.op)) {
    j["nope_dim"] = c.nope_dim;
  } else {
    j["k_dim"] = c.k_dim;
    j["v_dim"] = c.v_dim;
  }
  j["in_layout"] = to_string(c.in_layout);
  j["out_layout"] = to_string(c.out_layout);
  j["table_layout"] = to_string(c.table_layout);
  j["inverse"] = c.inverse;
  j["in_place"] = c.in_place;
  j["cp_size"] = c.cp_size;
  j["cp_rank"] = c.cp_rank;
  if (c.layout == TokenLayout::thd) {
    j["freq_mode"] = to_string(c.freq_mode);
    j["max_seqlen"] = c.max_seqlen;
  }
  j["inputs"] = c.inputs;
  if (c.yarn) j["yarn"] = to_json(*c.yarn);
  return j;
}

std::vector<std::string> required_inputs(const CaseConfig& c) {
  std::vector<std::string> names = {"cos", "sin"};
  for (const std::string& name : schema_of(c.op).input_names()) names.push_back(name);
  if (c.layout == TokenLayout::thd) names.push_back("cu_seqlens");
  return names;
}

Case read_case(const fs::path& dir) {
  const fs::path json_path = dir / "case.json";
  const std::string where = json_path.string();
  std::ifstream in(json_path);
  if (!in) throw Error(where + ": cannot open (is " + dir.string() + " a case directory?)");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(where + ": not valid JSON: " + e.what());
  }
  Case c;
  c.config = parse_config(j, where);
  if (c.config.yarn) {  // the named table, made now: it is then checked like a shipped one
    auto [cos, sin] = with_where(where, [&] {
      return yarn_arrays(*c.config.yarn, c.config.emb_dim, c.config.table_dtype,
                         c.config.table_layout);
    });
    check_array(where + " (yarn cos)", "cos", cos, c.config);
    check_array(where + " (yarn sin)", "sin", sin, c.config);
    c.arrays["cos"] = std::move(cos);
    c.arrays["sin"] = std::move(sin);
  }
  for (const std::string& name : required_inputs(c.config))
    if (c.config.yarn && (name == "cos" || name == "sin")) continue;
    else if (!c.config.inputs.count(name))
      throw Error(where + ": inputs has no '" + name + "', which " +
                  std::string(to_string(c.config.op)) + (name == "cu_seqlens" ? " on THD" : "") +
                  " needs");
  static const char* optional[] = {"position_ids", "seq_offsets"};
  std::vector<std::string> names = required_inputs(c.config);
  for (const char* name : optional)
    if (c.config.inputs.count(name)) names.push_back(name);
  for (const std::string& name : names) {
    if (c.arrays.count(name)) continue;  // a named YaRN table
    const fs::path file = dir / c.config.inputs.at(name);
    npy::Array a;
    try {
      a = npy::read(file);
    } catch (const npy::Error& e) {
      throw Error(e.what());
    }
    check_array(file.string(), name, a, c.config);
    c.arrays[name] = std::move(a);
  }
  return c;
}

void write_case(const fs::path& dir, const Case& c) {
  fs::create_directories(dir);
  const auto named = [&](const std::string& name) {
    return c.config.yarn && (name == "cos" || name == "sin");
  };
  for (const auto& [name, array] : c.arrays) {
    if (named(name)) continue;
    const auto it = c.config.inputs.find(name);
    const std::string file = it != c.config.inputs.end() ? it->second : name + ".npy";
    npy::write(dir / file, array);
  }
  CaseConfig config = c.config;
  for (const auto& [name, array] : c.arrays)
    if (!config.inputs.count(name) && !named(name)) config.inputs[name] = name + ".npy";
  std::ofstream out(dir / "case.json");
  out << to_json(config).dump(1) << "\n";
  if (!out) throw Error((dir / "case.json").string() + ": cannot write");
}

void write_outputs(const fs::path& dir, const CaseOutputs& outputs) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir.string() + ": cannot create output directory: " + ec.message());
  for (const auto& [name, array] : outputs.arrays) {
    try {
      npy::write(dir / (name + ".npy"), array);
    } catch (const npy::Error& e) {
      throw Error(e.what());
    }
  }
}

namespace {
template <class View, class ArrayRef>
View make_view(ArrayRef& a, DType dtype) {
  View v;
  v.data = a.bytes.data();
  v.dtype = dtype;
  v.rank = static_cast<int>(a.shape.size());
  std::int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.shape[d] = a.shape[d];
    v.strides[d] = stride;
    stride *= a.shape[d];
  }
  return v;
}
}  // namespace

ConstTensorView view_of(const npy::Array& a, DType dtype) {
  return make_view<ConstTensorView>(a, dtype);
}
TensorView view_of(npy::Array& a, DType dtype) { return make_view<TensorView>(a, dtype); }

}  // namespace mlarope::harness
