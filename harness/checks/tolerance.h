// SPDX-License-Identifier: Apache-2.0
// the tolerance model (docs/architecture.md): how far an f32-computing backend may be from the
// exact result.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/case_file.h"

namespace mlarope::harness {

/// Per output element: the f32 error allowance `4 * eps_f32 * (|u * c| + |v * s|)` (plus, for
/// grad_k_pe, `H * eps_f32 * sum over heads of (|gu| |c| + |gv| |s|)`); zero where the element
/// is copied (nope parts, value, passed-through rows). The ulp of the output is added by check.
std::map<std::string, std::vector<double>> f32_error_terms(const Case& c);

/// How an output element's f32 computation relates to the exact result.
enum class Exactness : std::uint8_t {
  inexact,  ///< the f32 products or their sum round: the tolerance above applies
  exact,    ///< both products and their sum are f32 numbers: the only rounding is the output's,
            ///< so a backend must give the reference's value (within 0, not within an ulp)
  tie,      ///< exact, and the exact value lies halfway between two values of the output dtype
};

/// Per rotated output element (rope, rope_backward, the rope part of key): its Exactness.
/// Other elements (copies, grad_k_pe's head sums) are `inexact` here.
std::map<std::string, std::vector<Exactness>> exactness(const Case& c);

/// Outcome of comparing a backend's outputs with expected values under the tolerance model.
struct ToleranceResult {
  std::int64_t checked = 0;
  std::int64_t violations = 0;
  double max_ulps = 0.0;        ///< largest |got - expected| in ulps of the output dtype
  std::string first_violation;  ///< "out[3, 0, 1, 12]: expected .., got .., allowed .."
  bool ok() const { return violations == 0; }
};

/// Check every output in `got` against `expected` (arrays of any stored dtype, e.g. float64):
/// |got - expected| <= ulp_out(expected) + f32_error_terms, element by element.
ToleranceResult check_tolerance(const Case& c, const std::map<std::string, npy::Array>& got,
                                const std::map<std::string, npy::Array>& expected);

}  // namespace mlarope::harness
