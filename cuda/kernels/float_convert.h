// SPDX-License-Identifier: Apache-2.0
// The element types of the kernels and their conversions to and from float, exact and round to
// nearest even, the same bits on the device and on the host (the f16 and bf16 rounding of the
// whole library: the reference's conversions are checked against these).
#pragma once

#include <cstdint>

#include "kernels/portability.h"

namespace mlarope::kernels {

/// Storage of one IEEE binary16 element.
struct Half {
  std::uint16_t bits;
};
/// Storage of one bfloat16 element.
struct BFloat16 {
  std::uint16_t bits;
};

/// f16 bits -> float (exact).
MLAROPE_HD MLAROPE_INLINE float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return float_from_bits(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return float_from_bits(sign | float_bits(magnitude));
  }
  return float_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/// `value` shifted right by `shift` (1..31) with round to nearest, ties to even.
MLAROPE_HD MLAROPE_INLINE std::uint32_t shift_right_rne(std::uint32_t value, int shift) {
  const std::uint32_t kept = value >> shift;
  const std::uint32_t rest = value & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1);
  return kept + ((rest > halfway || (rest == halfway && (kept & 1u))) ? 1u : 0u);
}

/// float -> f16 bits, round to nearest even; NaN stays NaN, overflow goes to infinity.
MLAROPE_HD MLAROPE_INLINE std::uint16_t float_to_half(float x) {
  const std::uint32_t bits = float_bits(x);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  std::uint32_t h;
  if (magnitude > 0x7f800000u) {
    h = 0x7e00u | ((magnitude >> 13) & 0x3ffu);  // quiet NaN, payload kept where it fits
  } else if (magnitude >= 0x477ff000u) {
    h = 0x7c00u;                          // >= 65520 rounds to infinity (and infinity itself)
  } else if (magnitude >= 0x38800000u) {  // normal f16
    h = shift_right_rne(magnitude - 0x38000000u, 13);
  } else if (magnitude > 0x33000000u) {  // subnormal f16 (2^-25 itself ties to zero)
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    h = shift_right_rne(mantissa, static_cast<int>(126u - exponent));
  } else {
    h = 0;
  }
  return static_cast<std::uint16_t>(sign | h);
}

/// bf16 bits -> float (exact).
MLAROPE_HD MLAROPE_INLINE float bf16_to_float(std::uint16_t b) {
  return float_from_bits(static_cast<std::uint32_t>(b) << 16);
}

/// float -> bf16 bits, round to nearest even; NaN stays NaN (branch free: vectorizes).
MLAROPE_HD MLAROPE_INLINE std::uint16_t float_to_bf16(float x) {
  const std::uint32_t bits = float_bits(x);
  const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return static_cast<std::uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

/// The float nearest to `x` with ties to the odd neighbour: rounding it once more to f16 or
/// bf16 equals rounding `x` directly (what a double computation needs to round once).
MLAROPE_HD MLAROPE_INLINE float double_to_float_round_odd(double x) {
  float f = static_cast<float>(x);
  if (static_cast<double>(f) == x || x != x) return f;
  std::uint32_t bits = float_bits(f);
  if ((bits & 0x7fffffffu) == 0x7f800000u) return f;  // overflow
  if ((bits & 1u) == 0) {
    const double ff = static_cast<double>(f);
    const bool above = (ff < 0 ? -ff : ff) > (x < 0 ? -x : x);
    bits = above ? bits - 1u : bits + 1u;
  }
  return float_from_bits(bits);
}

/// Element conversions: every activation and table element is computed on as a float.
MLAROPE_HD MLAROPE_INLINE float to_float(float x) { return x; }
MLAROPE_HD MLAROPE_INLINE float to_float(Half x) { return half_to_float(x.bits); }
MLAROPE_HD MLAROPE_INLINE float to_float(BFloat16 x) { return bf16_to_float(x.bits); }

/// float -> element type T, round to nearest even.
template <class T>
MLAROPE_HD MLAROPE_INLINE T from_float(float x);
template <>
MLAROPE_HD MLAROPE_INLINE float from_float<float>(float x) {
  return x;
}
template <>
MLAROPE_HD MLAROPE_INLINE Half from_float<Half>(float x) {
  return Half{float_to_half(x)};
}
template <>
MLAROPE_HD MLAROPE_INLINE BFloat16 from_float<BFloat16>(float x) {
  return BFloat16{float_to_bf16(x)};
}

}  // namespace mlarope::kernels
