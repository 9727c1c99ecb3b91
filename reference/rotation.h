// SPDX-License-Identifier: Apache-2.0
// The rotation of one rope slice and its adjoint (docs/semantics.md §3, §4), in double.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "mlarope/ops.h"

namespace mlarope::reference {

/// Positions of logical pair i inside a slice of d elements.
struct PairPositions {
  std::int64_t u, v;
};
inline PairPositions pair_positions(PairLayout layout, std::int64_t i, std::int64_t d) {
  if (layout == PairLayout::half) return {i, i + d / 2};
  return {2 * i, 2 * i + 1};
}

/// a + b rounded to odd in double (ties to the odd neighbour): the one rounding to the output
/// type that follows then gives the correctly rounded a + b. For a, b exact products of stored
/// values the result is exact before that last rounding (no double rounding; see host_convert.h).
inline double sum_rounded_to_odd(double a, double b) {
  double sum = a + b;
  const double b_virtual = sum - a;  // TwoSum: the rounding error of sum, exactly
  const double error = (a - (sum - b_virtual)) + (b - b_virtual);
  if (error == 0 || !std::isfinite(sum)) return sum;
  std::uint64_t bits;
  std::memcpy(&bits, &sum, sizeof bits);
  if ((bits & 1u) == 0)  // the odd neighbour lies on the side of the error
    sum = std::nextafter(sum, error > 0 ? std::numeric_limits<double>::infinity()
                                        : -std::numeric_limits<double>::infinity());
  return sum;
}

/// y = rotate(x) for one slice of d elements; c and s are the table row.
/// The products of two stored values are exact in double; the sum is rounded to odd, so the
/// store to the output type is the only rounding.
inline void rotate(const double* x, double* y, const double* c, const double* s, const Rotation& r,
                   std::int64_t d) {
  const double sg = r.inverse ? -1.0 : 1.0;
  for (std::int64_t i = 0; i < d / 2; ++i) {
    const auto [iu, iv] = pair_positions(r.in_layout, i, d);
    const auto [ou, ov] = pair_positions(r.out_layout, i, d);
    const auto [tu, tv] = pair_positions(r.table_layout, i, d);
    const double u = x[iu], v = x[iv];
    y[ou] = sum_rounded_to_odd(u * c[tu], -(v * sg * s[tu]));
    y[ov] = sum_rounded_to_odd(v * c[tv], u * sg * s[tv]);
  }
}

/// grad_x = rotate^T(grad_y): the exact adjoint for the same flags (docs/semantics.md §4).
inline void rotate_adjoint(const double* grad_y, double* grad_x, const double* c, const double* s,
                           const Rotation& r, std::int64_t d) {
  const double sg = r.inverse ? -1.0 : 1.0;
  for (std::int64_t i = 0; i < d / 2; ++i) {
    const auto [iu, iv] = pair_positions(r.in_layout, i, d);
    const auto [ou, ov] = pair_positions(r.out_layout, i, d);
    const auto [tu, tv] = pair_positions(r.table_layout, i, d);
    const double gu = grad_y[ou], gv = grad_y[ov];
    grad_x[iu] = sum_rounded_to_odd(gu * c[tu], gv * sg * s[tv]);
    grad_x[iv] = sum_rounded_to_odd(gv * c[tv], -(gu * sg * s[tu]));
  }
}

}  // namespace mlarope::reference
