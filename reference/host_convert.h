// SPDX-License-Identifier: Apache-2.0
// Host-side element conversions with exact IEEE round-to-nearest-even: what the reference
// and the harness use to read and write f32, f16 and bf16 data.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "mlarope/types.h"

namespace mlarope {

/// The float nearest to `x`, with ties broken to the odd neighbour (round to odd). Rounding
/// that float to f16 or bf16 with round-to-nearest-even then equals rounding `x` directly,
/// because float keeps more than two extra bits of both (no double-rounding error).
inline float round_to_odd_float(double x) {
  float f = static_cast<float>(x);
  if (static_cast<double>(f) == x || std::isnan(x) || std::isinf(f)) return f;
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 1u) == 0) {
    // f is the even neighbour; the odd one lies on the other side of x.
    const bool f_above = std::fabs(static_cast<double>(f)) > std::fabs(x);
    bits = f_above ? bits - 1 : bits + 1;
    std::memcpy(&f, &bits, sizeof f);
  }
  return f;
}

/// Raw bits of the bf16 nearest to x (ties to even).
inline std::uint16_t bf16_bits_from_double(double x) {
  return Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(round_to_odd_float(x)));
}
/// Raw bits of the f16 nearest to x (ties to even).
inline std::uint16_t f16_bits_from_double(double x) {
  return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(round_to_odd_float(x)));
}
/// The value of bf16 bits.
inline double double_from_bf16_bits(std::uint16_t bits) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(bits));
}
/// The value of f16 bits.
inline double double_from_f16_bits(std::uint16_t bits) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits));
}

/// Element `index` of `base` (of type `dtype`) as a double.
inline double load_as_double(const void* base, DType dtype, std::int64_t index) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[index];
    case DType::f16: return double_from_f16_bits(static_cast<const std::uint16_t*>(base)[index]);
    case DType::bf16: return double_from_bf16_bits(static_cast<const std::uint16_t*>(base)[index]);
  }
  return 0.0;
}

/// Store `x` rounded once (nearest, ties to even) into element `index` of `base`.
inline void store_rounded(void* base, DType dtype, std::int64_t index, double x) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[index] = static_cast<float>(x); break;
    case DType::f16: static_cast<std::uint16_t*>(base)[index] = f16_bits_from_double(x); break;
    case DType::bf16: static_cast<std::uint16_t*>(base)[index] = bf16_bits_from_double(x); break;
  }
}

/// x rounded once to `dtype`, returned as a double.
inline double round_to(DType dtype, double x) {
  switch (dtype) {
    case DType::f32: return static_cast<float>(x);
    case DType::f16: return double_from_f16_bits(f16_bits_from_double(x));
    case DType::bf16: return double_from_bf16_bits(bf16_bits_from_double(x));
  }
  return x;
}

}  // namespace mlarope
