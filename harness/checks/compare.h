// SPDX-License-Identifier: Apache-2.0
// Comparing outputs with expected values, with errors in ulps of the output dtype.
#pragma once

#include <cstdint>
#include <string>

#include "io/npy.h"
#include "mlarope/types.h"

namespace mlarope::harness {

/// Spacing of `dtype` at |x|: the size of one unit in the last place (subnormals included).
double ulp_of(DType dtype, double x);

/// The value of element i of an array stored as `dtype` (or f64/i32/i64 arrays as they are).
double value_at(const npy::Array& a, DType dtype, std::int64_t i);

/// Result of comparing an array with expected values.
struct Comparison {
  bool same_shape = true;
  std::int64_t count = 0;         ///< elements compared
  std::int64_t worst_index = -1;  ///< flat index of the largest error in ulps
  double max_ulps = 0.0;          ///< largest |got - expected| / ulp_of(expected)
  double expected_at_worst = 0.0;
  double got_at_worst = 0.0;
  std::int64_t nan_mismatches = 0;  ///< NaN on one side only
  /// "max 0.5 ulp at [3, 1, 0, 12] (expected 0.125, got 0.1250001)" or a shape message.
  std::string summary(const std::vector<std::int64_t>& shape) const;
};

/// Compare `got` (stored as `dtype`) with `expected` (usually float64), element by element.
Comparison compare_ulps(const npy::Array& got, DType dtype, const npy::Array& expected);

/// "[i, j, k]" for a flat C-order index into `shape`.
std::string index_string(std::int64_t flat, const std::vector<std::int64_t>& shape);

}  // namespace mlarope::harness
