// SPDX-License-Identifier: Apache-2.0
#include "checks/compare.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "host_convert.h"

namespace mlarope::harness {

double ulp_of(DType dtype, double x) {
  int mantissa_bits = 23, min_exponent = -126;  // f32
  if (dtype == DType::bf16) mantissa_bits = 7;
  if (dtype == DType::f16) mantissa_bits = 10, min_exponent = -14;
  const double ax = std::fabs(x);
  int exponent = ax > 0 && std::isfinite(ax) ? std::ilogb(ax) : min_exponent;
  if (exponent < min_exponent) exponent = min_exponent;
  return std::ldexp(1.0, exponent - mantissa_bits);
}

double value_at(const npy::Array& a, DType dtype, std::int64_t i) {
  switch (a.dtype) {
    case npy::Dtype::f64: return a.data<double>()[i];
    case npy::Dtype::f32: return a.data<float>()[i];
    case npy::Dtype::f16: return double_from_f16_bits(a.data<std::uint16_t>()[i]);
    case npy::Dtype::u16:
      return dtype == DType::bf16 ? double_from_bf16_bits(a.data<std::uint16_t>()[i])
                                  : a.data<std::uint16_t>()[i];
    case npy::Dtype::i32: return a.data<std::int32_t>()[i];
    case npy::Dtype::i64: return static_cast<double>(a.data<std::int64_t>()[i]);
  }
  return 0.0;
}

std::string index_string(std::int64_t flat, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::ostringstream s;
  s << "[";
  for (std::size_t d = 0; d < index.size(); ++d) s << (d ? ", " : "") << index[d];
  s << "]";
  return s.str();
}

Comparison compare_ulps(const npy::Array& got, DType dtype, const npy::Array& expected) {
  Comparison c;
  if (got.shape != expected.shape) {
    c.same_shape = false;
    return c;
  }
  c.count = got.size();
  for (std::int64_t i = 0; i < c.count; ++i) {
    const double g = value_at(got, dtype, i), e = value_at(expected, DType::f32, i);
    if (std::isnan(g) || std::isnan(e)) {
      if (std::isnan(g) != std::isnan(e)) ++c.nan_mismatches;
      continue;
    }
    const double ulps = g == e ? 0.0 : std::fabs(g - e) / ulp_of(dtype, e);
    if (ulps > c.max_ulps || c.worst_index < 0) {
      c.max_ulps = std::max(ulps, c.max_ulps);
      if (ulps >= c.max_ulps) {
        c.worst_index = i;
        c.expected_at_worst = e;
        c.got_at_worst = g;
      }
    }
  }
  return c;
}

std::string Comparison::summary(const std::vector<std::int64_t>& shape) const {
  if (!same_shape) return "shape differs from expected";
  std::ostringstream s;
  s.precision(9);
  s << "max " << max_ulps << " ulp over " << count << " elements";
  if (worst_index >= 0 && max_ulps > 0)
    s << " (worst at " << index_string(worst_index, shape) << ": expected " << expected_at_worst
      << ", got " << got_at_worst << ")";
  if (nan_mismatches) s << ", " << nan_mismatches << " NaN mismatches";
  return s.str();
}

}  // namespace mlarope::harness
