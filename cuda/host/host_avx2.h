// SPDX-License-Identifier: Apache-2.0
// AVX2 forms of the slice runs of host_slice_rotation.h (kernels/host_simd.h has the SSE2 ones),
// for rope's fast branch compiled for AVX2 (host_kernels.cpp). They are functions of their own
// target (GCC and Clang on x86-64): the build's baseline stays SSE2, and the AVX2 branch is taken
// only where the CPU has it (host_has_avx2). Host only: not a kernel header.
#pragma once

#include "kernels/host_simd.h"

#if defined(MLAROPE_HOST_SSE2) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MLAROPE_HOST_AVX2 1
#define MLAROPE_AVX2_FUNCTION __attribute__((target("avx2")))

#include <immintrin.h>

#include <cstdint>
#include <cstdlib>

namespace mlarope::host {

/// True where the host's fast branches take their AVX2 forms: the CPU has AVX2, and
/// MLAROPE_HOST_NO_AVX2 is not set (set, they take the SSE2 forms, as a CPU without AVX2 does).
inline bool host_has_avx2() {
  // __builtin_cpu_supports returns the feature's bit, not 1: tested as a truth value.
  static const bool has =
      std::getenv("MLAROPE_HOST_NO_AVX2") == nullptr && __builtin_cpu_supports("avx2");
  return has;
}

/// 8 floats -> bf16 bits as float_to_bf16x4_lanes does 4.
MLAROPE_AVX2_FUNCTION inline __m256i float_to_bf16x8_lanes(__m256 f) {
  const __m256i bits = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb);
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
  return _mm256_srai_epi32(_mm256_blendv_epi8(rounded, quiet, is_nan), 16);
}

/// kernels::host_simd::Sse2Runs' forms 8 pairs or elements a step, compiled for AVX2: for code
/// compiled for AVX2 (host_kernels.cpp), taken where host_has_avx2().
struct Avx2Runs {
  static constexpr std::int64_t kPairStep = 8, kRunStep = 8;

  MLAROPE_AVX2_FUNCTION static void bf16_pairs_to_floats(const void* p, std::int64_t n, float* u,
                                                         float* v) {
    const auto* words = static_cast<const unsigned char*>(p);
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    for (std::int64_t i = 0; i < n; i += 8) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + 4 * i));
      _mm256_storeu_ps(u + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
      _mm256_storeu_ps(v + i, _mm256_castsi256_ps(_mm256_and_si256(w, high)));
    }
  }

  MLAROPE_AVX2_FUNCTION static void bf16_run_to_floats(const void* p, std::int64_t n, float* f) {
    const auto* bytes = static_cast<const unsigned char*>(p);
    for (std::int64_t i = 0; i < n; i += 8) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + 2 * i));
      _mm256_storeu_ps(f + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16)));
    }
  }

  MLAROPE_AVX2_FUNCTION static void floats_to_bf16_pairs(const float* u, const float* v,
                                                         std::int64_t n, void* p) {
    auto* words = static_cast<unsigned char*>(p);
    const __m256i low = _mm256_set1_epi32(0xffff);
    for (std::int64_t i = 0; i < n; i += 8) {
      const __m256i lu = float_to_bf16x8_lanes(_mm256_loadu_ps(u + i));
      const __m256i lv = float_to_bf16x8_lanes(_mm256_loadu_ps(v + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + 4 * i),
                          _mm256_or_si256(_mm256_and_si256(lu, low), _mm256_slli_epi32(lv, 16)));
    }
  }

  MLAROPE_AVX2_FUNCTION static void floats_to_bf16_run(const float* f, std::int64_t n, void* p) {
    auto* bytes = static_cast<unsigned char*>(p);
    for (std::int64_t i = 0; i < n; i += 8) {
      const __m256i lanes = float_to_bf16x8_lanes(_mm256_loadu_ps(f + i));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes + 2 * i),
                       _mm_packs_epi32(_mm256_castsi256_si128(lanes),
                                       _mm256_extracti128_si256(lanes, 1)));
    }
  }
};

}  // namespace mlarope::host
#endif
