// SPDX-License-Identifier: Apache-2.0
// Comparing outputs element by element: under the tolerance model (docs/architecture.md) (copied
// elements bitwise), or bitwise throughout; the worst element reported as (token, head, dim).
#pragma once

#include <array>
#include <map>
#include <string>
#include <vector>

#include "checks/checks.h"
#include "checks/tolerance.h"
#include "io/case_file.h"

namespace mlarope::harness {

/// What comparing a case's outputs needs, computed once per case.
struct ValueContext {
  std::map<std::string, std::vector<double>> terms;     ///< f32_error_terms of tolerance.h
  std::map<std::string, std::vector<bool>> copied;      ///< elements that are copies of an input
  std::map<std::string, std::vector<Exactness>> exact;  ///< exactness() of tolerance.h
};

/// The tolerance terms and the copied elements (nope parts, value, kv parts, passed-through
/// rows) of every output of `c`.
ValueContext value_context(const Case& c);

/// Compare `got` with `expected` (outputs of `c`, and the status word): copied elements must be
/// bitwise equal, others within factor * (ulp + f32 terms). Adds every error to `histogram`
/// when it is not null. The result is of kind `kind`; "what" prefixes the message.
CheckResult compare_outputs(const Case& c, const ValueContext& context, const CaseOutputs& got,
                            const CaseOutputs& expected, CheckKind kind, double factor,
                            UlpHistogram* histogram, const std::string& what = "");

/// The EdgeValue classes of the elements of `expected` (the reference's outputs of `c`).
std::array<std::int64_t, kEdgeValueCount> count_edges(const Case& c, const ValueContext& context,
                                                      const CaseOutputs& expected);

/// Bitwise comparison of two runs' outputs and status words, as a result of kind `kind`.
CheckResult compare_bitwise(const Case& c, const CaseOutputs& a, const CaseOutputs& b,
                            CheckKind kind, const std::string& what);

/// Fill token, head and dim of `r` from its index tuple (rank 3 [t, h, d] or rank 4 [s, b, h, d]).
void set_element(CheckResult& r, const std::string& tensor, const std::vector<std::int64_t>& shape,
                 std::int64_t flat);

/// "out[3, 0, 1, 12] (token 3, head 1, dim 12)".
std::string element_string(const CheckResult& r);

}  // namespace mlarope::harness
