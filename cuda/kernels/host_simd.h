// SPDX-License-Identifier: Apache-2.0
// Host-only SSE2 forms of the bf16 pair-chunk loads and stores of pair_rotation.h (4 pairs)
// and of the slice runs of host_slice_rotation.h (host/host_avx2.h has AVX2 forms of the runs):
// the same values, bit for bit, as the generic element code (portability_test checks it), in a
// handful of instructions instead of the compiler's shuffle-heavy vectorization. Leaves only: the
// kernel logic that calls them is the same on both sides (docs/architecture.md rule 2).
#pragma once

#if !defined(__CUDACC__) && defined(__SSE2__)
#define MLAROPE_HOST_SSE2 1

#include <emmintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mlarope::kernels::host_simd {

/// 4 bf16 (the low 8 bytes of `x`) -> 4 floats.
inline __m128 bf16x4_to_float(__m128i x) {
  return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), x));
}

/// 4 floats -> bf16 bits, round to nearest even, NaN quieted (float_to_bf16), each as a
/// sign-extended 32-bit lane (so that _mm_packs_epi32 packs them exactly).
inline __m128i float_to_bf16x4_lanes(__m128 f) {
  const __m128i bits = _mm_castps_si128(f);
  const __m128i lsb = _mm_and_si128(_mm_srli_epi32(bits, 16), _mm_set1_epi32(1));
  const __m128i rounded = _mm_add_epi32(_mm_add_epi32(bits, _mm_set1_epi32(0x7fff)), lsb);
  const __m128i magnitude = _mm_and_si128(bits, _mm_set1_epi32(0x7fffffff));
  const __m128i is_nan = _mm_cmpgt_epi32(magnitude, _mm_set1_epi32(0x7f800000));
  const __m128i quiet = _mm_or_si128(bits, _mm_set1_epi32(0x00400000));
  const __m128i chosen =
      _mm_or_si128(_mm_and_si128(is_nan, quiet), _mm_andnot_si128(is_nan, rounded));
  return _mm_srai_epi32(chosen, 16);
}

/// Pairs of 4 interleaved bf16 pairs (16 bytes at p): u and v.
inline void load_interleaved(const void* p, float* u, float* v) {
  const __m128i x = _mm_loadu_si128(static_cast<const __m128i*>(p));
  const __m128 lo = _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), x));  // u0 v0 u1 v1
  const __m128 hi = _mm_castsi128_ps(_mm_unpackhi_epi16(_mm_setzero_si128(), x));  // u2 v2 u3 v3
  _mm_storeu_ps(u, _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
  _mm_storeu_ps(v, _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
}

/// 4 bf16 at p_u and 4 at p_v (half layout).
inline void load_half(const void* p_u, const void* p_v, float* u, float* v) {
  _mm_storeu_ps(u, bf16x4_to_float(_mm_loadl_epi64(static_cast<const __m128i*>(p_u))));
  _mm_storeu_ps(v, bf16x4_to_float(_mm_loadl_epi64(static_cast<const __m128i*>(p_v))));
}

/// u0..u3, v0..v3 as bf16 in one register.
inline __m128i pack(const float* u, const float* v) {
  return _mm_packs_epi32(float_to_bf16x4_lanes(_mm_loadu_ps(u)),
                         float_to_bf16x4_lanes(_mm_loadu_ps(v)));
}

/// Store 4 pairs interleaved (16 bytes at p).
inline void store_interleaved(void* p, const float* u, const float* v) {
  const __m128i uv = pack(u, v);
  _mm_storeu_si128(static_cast<__m128i*>(p), _mm_unpacklo_epi16(uv, _mm_srli_si128(uv, 8)));
}

/// Store 4 u at p_u and 4 v at p_v (half layout).
inline void store_half(void* p_u, void* p_v, const float* u, const float* v) {
  const __m128i uv = pack(u, v);
  _mm_storel_epi64(static_cast<__m128i*>(p_u), uv);
  _mm_storel_epi64(static_cast<__m128i*>(p_v), _mm_srli_si128(uv, 8));
}

/// The SSE2 forms of the runs of a rope slice (host_slice_rotation.h): pairs 4 a step, runs
/// of elements 8 a step; the caller converts what is left of a run past its last whole step.
struct Sse2Runs {
  static constexpr std::int64_t kPairStep = 4, kRunStep = 8;
  static constexpr std::int64_t kRegisterSlicePairs = 0;  // no slice in registers

  /// Pairs 0 .. n - 1 (n a multiple of 4) of interleaved bf16 pairs at p: each pair is one 32-bit
  /// word, u in its low half, so u's float is the word shifted up and v's the word's high half.
  static void bf16_pairs_to_floats(const void* p, std::int64_t n, float* u, float* v) {
    const auto* words = static_cast<const unsigned char*>(p);
    const __m128i high = _mm_set1_epi32(static_cast<int>(0xffff0000u));
    for (std::int64_t i = 0; i < n; i += 4) {
      const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(words + 4 * i));
      _mm_storeu_ps(u + i, _mm_castsi128_ps(_mm_slli_epi32(w, 16)));
      _mm_storeu_ps(v + i, _mm_castsi128_ps(_mm_and_si128(w, high)));
    }
  }

  /// Elements 0 .. n - 1 (n a multiple of 8) of a bf16 run at p, as floats.
  static void bf16_run_to_floats(const void* p, std::int64_t n, float* f) {
    const auto* bytes = static_cast<const unsigned char*>(p);
    for (std::int64_t i = 0; i < n; i += 8) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + 2 * i));
      _mm_storeu_ps(f + i, bf16x4_to_float(x));
      _mm_storeu_ps(f + i + 4, _mm_castsi128_ps(_mm_unpackhi_epi16(_mm_setzero_si128(), x)));
    }
  }

  /// u[0 .. n - 1] and v[0 .. n - 1] (n a multiple of 4) as interleaved bf16 pairs at p.
  static void floats_to_bf16_pairs(const float* u, const float* v, std::int64_t n, void* p) {
    auto* words = static_cast<unsigned char*>(p);
    const __m128i low = _mm_set1_epi32(0xffff);
    for (std::int64_t i = 0; i < n; i += 4) {
      const __m128i lu = float_to_bf16x4_lanes(_mm_loadu_ps(u + i));
      const __m128i lv = float_to_bf16x4_lanes(_mm_loadu_ps(v + i));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(words + 4 * i),
                       _mm_or_si128(_mm_and_si128(lu, low), _mm_slli_epi32(lv, 16)));
    }
  }

  /// f[0 .. n - 1] (n a multiple of 8) as a bf16 run at p.
  static void floats_to_bf16_run(const float* f, std::int64_t n, void* p) {
    auto* bytes = static_cast<unsigned char*>(p);
    for (std::int64_t i = 0; i < n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes + 2 * i),
                       _mm_packs_epi32(float_to_bf16x4_lanes(_mm_loadu_ps(f + i)),
                                       float_to_bf16x4_lanes(_mm_loadu_ps(f + i + 4))));
  }
};

/// memcpy with streaming (non-temporal) 16-byte stores wherever `dst` is aligned: an output
/// written once skips the read for ownership of its cache lines (a third of a copy's memory
/// traffic). The stores are weakly ordered: the launch ends with store_fence().
inline void stream_copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(d) % 16) % 16;
  if (head >= bytes) {
    std::memcpy(d, s, bytes);
    return;
  }
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  for (; bytes >= 16; bytes -= 16, d += 16, s += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(d),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  std::memcpy(d, s, bytes);
}

}  // namespace mlarope::kernels::host_simd

#endif

#if !defined(__CUDA_ARCH__)
#include <cstddef>
#include <cstring>

namespace mlarope::kernels {

/// The host fast branches' copy of an output part: streaming stores where SSE2 is there (the
/// host compiler's build), else memcpy (nvcc's host pass, where no host fast branch runs).
inline void host_stream_copy(void* dst, const void* src, std::size_t bytes) {
#if defined(MLAROPE_HOST_SSE2)
  host_simd::stream_copy(dst, src, bytes);
#else
  if (bytes > 0) std::memcpy(dst, src, bytes);
#endif
}

/// Orders the streaming stores of a host fast branch before whatever follows the launch.
inline void host_store_fence() {
#if defined(MLAROPE_HOST_SSE2)
  _mm_sfence();
#endif
}

}  // namespace mlarope::kernels
#endif
