// SPDX-License-Identifier: Apache-2.0
// AVX2 forms of the slice runs of host_slice_rotation.h (kernels/host_simd.h has the SSE2 ones),
// for rope's fast branch compiled for AVX2 (host_kernels.cpp). They are functions of their own
// target (GCC and Clang on x86-64): the build's baseline stays SSE2, and the AVX2 branch is taken
// only where the CPU has it (host_has_avx2). Host only: not a kernel header.
#pragma once

#include "kernels/host_simd.h"
#include "kernels/host_slice_rotation.h"

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

/// 8 floats -> bf16 bits rounded to nearest even, in the high half of each 32-bit lane (the low
/// half is left over from the rounding); meaningless for a NaN, which the callers take apart.
MLAROPE_AVX2_FUNCTION inline __m256i round_to_bf16_high(__m256 f) {
  const __m256i bits = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  return _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb);
}

/// 8 floats -> bf16 bits as float_to_bf16x4_lanes does 4.
MLAROPE_AVX2_FUNCTION inline __m256i float_to_bf16x8_lanes(__m256 f) {
  const __m256i bits = _mm256_castps_si256(f);
  const __m256i rounded = round_to_bf16_high(f);
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
  return _mm256_srai_epi32(_mm256_blendv_epi8(rounded, quiet, is_nan), 16);
}

/// The kMlaHalfDim pairs of a bf16 slice at `p` in `layout` as floats, 8 pairs a register.
MLAROPE_AVX2_FUNCTION inline void load_bf16_slice(const void* p, PairLayout layout, __m256* u,
                                                  __m256* v) {
  constexpr std::int64_t kSteps = kernels::kMlaHalfDim / 8;
  const auto* bytes = static_cast<const unsigned char*>(p);
  if (layout == PairLayout::interleaved) {
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    for (std::int64_t j = 0; j < kSteps; ++j) {  // a pair is a 32-bit word, u in its low half
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes + 32 * j));
      u[j] = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
      v[j] = _mm256_castsi256_ps(_mm256_and_si256(w, high));
    }
    return;
  }
  for (std::int64_t j = 0; j < kSteps; ++j) {  // u's run, then v's
    const __m128i xu = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + 16 * j));
    const __m128i xv = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(bytes + 2 * kernels::kMlaHalfDim + 16 * j));
    u[j] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(xu), 16));
    v[j] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(xv), 16));
  }
}

/// Store the kMlaHalfDim pairs (u, v: 8 a register, none NaN) as bf16 at `p` in `layout`.
MLAROPE_AVX2_FUNCTION inline void store_bf16_slice(const __m256* u, const __m256* v,
                                                   PairLayout layout, void* p) {
  constexpr std::int64_t kSteps = kernels::kMlaHalfDim / 8;
  auto* bytes = static_cast<unsigned char*>(p);
  if (layout == PairLayout::interleaved) {
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    // u's bits in the low half of each word, v's in the high half.
    for (std::int64_t j = 0; j < kSteps; ++j) {
      const __m256i w = _mm256_or_si256(_mm256_srli_epi32(round_to_bf16_high(u[j]), 16),
                                        _mm256_and_si256(round_to_bf16_high(v[j]), high));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(bytes + 32 * j), w);
    }
    return;
  }
  // Two registers of a run make 16 bf16: packed in each 128-bit half, then the halves' 64-bit
  // quarters put back in order.
  const __m256* runs[2] = {u, v};
  for (std::int64_t r = 0; r < 2; ++r)
    for (std::int64_t j = 0; j < kSteps; j += 2) {
      const __m256i lo = _mm256_srli_epi32(round_to_bf16_high(runs[r][j]), 16);
      const __m256i hi = _mm256_srli_epi32(round_to_bf16_high(runs[r][j + 1]), 16);
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(bytes + r * 2 * kernels::kMlaHalfDim + 16 * j),
                          packed);
    }
}

/// kernels::host_simd::Sse2Runs' forms 8 pairs or elements a step, compiled for AVX2: for code
/// compiled for AVX2 (host_kernels.cpp), taken where host_has_avx2().
struct Avx2Runs {
  static constexpr std::int64_t kPairStep = 8, kRunStep = 8;
  static constexpr std::int64_t kRegisterSlicePairs = kernels::kMlaHalfDim;

  /// Rotate one bf16 slice of kRegisterSlicePairs pairs from `in` (in `read`) into `out` (in
  /// `write`; may be `in`) in registers: the whole slice read, its pairs rotated, then stored,
  /// with no pass through memory between. The values of read_slice, rotate_slice and
  /// write_slice, bit for bit (the same products and sums, the same rounding), but for a NaN
  /// result, whose quieting it leaves to them: false, and nothing stored, where any result is NaN.
  MLAROPE_AVX2_FUNCTION static bool rotate_bf16_slice(const kernels::HostRowCoefficients& k,
                                                      const void* in, PairLayout read, void* out,
                                                      PairLayout write) {
    constexpr std::int64_t kSteps = kRegisterSlicePairs / 8;  // 8 pairs a register
    __m256 u[kSteps], v[kSteps];
    load_bf16_slice(in, read, u, v);
    __m256 nan = _mm256_setzero_ps();
    for (std::int64_t j = 0; j < kSteps; ++j) {
      const __m256 ru = _mm256_add_ps(_mm256_mul_ps(u[j], _mm256_loadu_ps(k.cos_u + 8 * j)),
                                      _mm256_mul_ps(v[j], _mm256_loadu_ps(k.p + 8 * j)));
      const __m256 rv = _mm256_add_ps(_mm256_mul_ps(v[j], _mm256_loadu_ps(k.cos_v + 8 * j)),
                                      _mm256_mul_ps(u[j], _mm256_loadu_ps(k.q + 8 * j)));
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(ru, rv, _CMP_UNORD_Q));
      u[j] = ru;
      v[j] = rv;
    }
    if (!_mm256_testz_ps(nan, nan)) return false;
    store_bf16_slice(u, v, write, out);
    return true;
  }

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

// AVX-512 (F and BW): rotate_bf16_slice 16 pairs a register, where the CPU has it. GCC 12's
// AVX-512 intrinsics start some results from _mm512_undefined_*, which -Wmaybe-uninitialized
// takes for a read of an uninitialised value (a false positive): silenced for this code only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define MLAROPE_AVX512_FUNCTION __attribute__((target("avx2,avx512f,avx512bw")))

/// True where rope's fast branch takes Avx512Runs: host_has_avx2() (MLAROPE_HOST_NO_AVX2 turns
/// both off), MLAROPE_HOST_NO_AVX512 is not set (set, the branch takes Avx2Runs, as a CPU with
/// AVX2 alone does), and the CPU has AVX-512 F and BW.
inline bool host_has_avx512() {
  static const bool has = host_has_avx2() && std::getenv("MLAROPE_HOST_NO_AVX512") == nullptr &&
                          __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has;
}

/// round_to_bf16_high for 16 floats.
MLAROPE_AVX512_FUNCTION inline __m512i round_to_bf16_high(__m512 f) {
  const __m512i bits = _mm512_castps_si512(f);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb);
}

/// Avx2Runs with the slice in 512-bit registers: half the instructions a slice.
struct Avx512Runs : Avx2Runs {
  /// Avx2Runs::rotate_bf16_slice, 16 pairs a register (the same values).
  MLAROPE_AVX512_FUNCTION static bool rotate_bf16_slice(const kernels::HostRowCoefficients& k,
                                                        const void* in, PairLayout read, void* out,
                                                        PairLayout write) {
    constexpr std::int64_t kSteps = kRegisterSlicePairs / 16;
    constexpr std::int64_t kRun = 2 * kRegisterSlicePairs;  // bytes of a half layout's run
    const auto* from = static_cast<const unsigned char*>(in);
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    __m512 u[kSteps], v[kSteps];
    for (std::int64_t j = 0; j < kSteps; ++j) {
      if (read == PairLayout::interleaved) {
        const __m512i w = _mm512_loadu_si512(from + 64 * j);
        u[j] = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
        v[j] = _mm512_castsi512_ps(_mm512_and_si512(w, high));
        continue;
      }
      const __m256i xu = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + 32 * j));
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + kRun + 32 * j));
      u[j] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(xu), 16));
      v[j] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(xv), 16));
    }
    __mmask16 nan = 0;
    for (std::int64_t j = 0; j < kSteps; ++j) {
      const __m512 ru = _mm512_add_ps(_mm512_mul_ps(u[j], _mm512_loadu_ps(k.cos_u + 16 * j)),
                                      _mm512_mul_ps(v[j], _mm512_loadu_ps(k.p + 16 * j)));
      const __m512 rv = _mm512_add_ps(_mm512_mul_ps(v[j], _mm512_loadu_ps(k.cos_v + 16 * j)),
                                      _mm512_mul_ps(u[j], _mm512_loadu_ps(k.q + 16 * j)));
      nan = static_cast<__mmask16>(nan | _mm512_cmp_ps_mask(ru, rv, _CMP_UNORD_Q));
      u[j] = ru;
      v[j] = rv;
    }
    if (nan != 0) return false;
    auto* to = static_cast<unsigned char*>(out);
    for (std::int64_t j = 0; j < kSteps; ++j) {
      const __m512i ru = round_to_bf16_high(u[j]), rv = round_to_bf16_high(v[j]);
      if (write == PairLayout::interleaved) {
        _mm512_storeu_si512(to + 64 * j,
                            _mm512_or_si512(_mm512_srli_epi32(ru, 16), _mm512_and_si512(rv, high)));
        continue;
      }
      // vpmovdw: each lane's low 16 bits, in order.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + 32 * j),
                          _mm512_cvtepi32_epi16(_mm512_srli_epi32(ru, 16)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + kRun + 32 * j),
                          _mm512_cvtepi32_epi16(_mm512_srli_epi32(rv, 16)));
    }
    return true;
  }
};

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace mlarope::host
#endif
