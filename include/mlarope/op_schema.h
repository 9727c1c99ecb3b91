// SPDX-License-Identifier: Apache-2.0
// What the library knows about each op (docs/semantics.md §4), in one table. Every list of ops
// and every per-op choice of tensor names (the command line, case files, the checks, the fuzz,
// the Python package) derives from it, so an op is named here once.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "mlarope/types.h"

namespace mlarope {

/// One op's names and pairing. Tensor names are those of case files (docs/case-format.md).
struct OpSchema {
  Op op;
  std::string_view name;                    ///< "rope": case files, the CLI and Python spell it
  std::array<std::string_view, 2> inputs;   ///< activation inputs in call order ("" past the last)
  std::array<std::string_view, 2> outputs;  ///< outputs in call order ("" past the last)
  Op forward;                               ///< the forward op of its pair (itself if forward)
  Op backward;                              ///< the backward op of its pair (itself if backward)
  bool has_in_place;                        ///< whether it has an in-place form

  /// The input whose rows and heads define the call (and, in place, its output too).
  std::string_view activation() const { return inputs[0]; }
  bool is_backward() const { return op == backward; }
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
};

/// Every op, in the order of the Op enum.
const std::array<OpSchema, 4>& op_schemas();
/// The schema of `op`.
const OpSchema& schema_of(Op op);
/// Every op, in the order of the Op enum.
std::vector<Op> all_ops();
/// The ops' names, comma separated ("rope, rope_backward, ..."), for messages.
std::string op_names();
/// Every activation input name of every op, each once, in the table's order.
std::vector<std::string> all_input_names();

}  // namespace mlarope
