// SPDX-License-Identifier: Apache-2.0
// The op table (include/mlarope/op_schema.h).
#include "mlarope/op_schema.h"

#include <algorithm>

namespace mlarope {

namespace {

std::vector<std::string> names_of(const std::array<std::string_view, 2>& names) {
  std::vector<std::string> out;
  for (std::string_view n : names)
    if (!n.empty()) out.emplace_back(n);
  return out;
}

}  // namespace

std::vector<std::string> OpSchema::input_names() const { return names_of(inputs); }
std::vector<std::string> OpSchema::output_names() const { return names_of(outputs); }

const std::array<OpSchema, 4>& op_schemas() {
  // In the order of the Op enum: schema_of indexes it.
  // clang-format off
  static const std::array<OpSchema, 4> table = {{
      // op                  name                 inputs                      outputs                       forward       backward               in place
      {Op::rope,              "rope",              {"t", ""},                  {"out", ""},                  Op::rope,     Op::rope_backward,     true},
      {Op::rope_backward,     "rope_backward",     {"grad_out", ""},           {"grad_t", ""},               Op::rope,     Op::rope_backward,     true},
      {Op::kv_split,          "kv_split",          {"kv", "k_pe"},             {"key", "value"},             Op::kv_split, Op::kv_split_backward, false},
      {Op::kv_split_backward, "kv_split_backward", {"grad_key", "grad_value"}, {"grad_kv", "grad_k_pe"},     Op::kv_split, Op::kv_split_backward, false},
  }};
  // clang-format on
  return table;
}

const OpSchema& schema_of(Op op) { return op_schemas()[static_cast<std::size_t>(op)]; }

std::vector<Op> all_ops() {
  std::vector<Op> ops;
  for (const OpSchema& s : op_schemas()) ops.push_back(s.op);
  return ops;
}

std::string op_names() {
  std::string names;
  for (const OpSchema& s : op_schemas()) names += (names.empty() ? "" : ", ") + std::string(s.name);
  return names;
}

std::vector<std::string> all_input_names() {
  std::vector<std::string> names;
  for (const OpSchema& s : op_schemas())
    for (const std::string& n : s.input_names())
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  return names;
}

}  // namespace mlarope
