// SPDX-License-Identifier: Apache-2.0
// The host fast branch's rotation of whole rope slices: a row's coefficients as four runs of
// floats, a slice's pairs as two, and loops over the pairs in order that the host compiler
// vectorizes (bf16's conversions in the SIMD forms of host_simd.h). The values are those of the
// pair-chunk code of pair_rotation.h, bit for bit (the same conversions, the same products and sums
// in the same order); host only, no GPU model.
#pragma once

#if !defined(__CUDA_ARCH__)
#include <cstdint>
#include <type_traits>

#include "kernels/element_io.h"
#include "kernels/float_convert.h"
#include "kernels/host_simd.h"
#include "kernels/pair_rotation.h"
#include "kernels/portability.h"

namespace mlarope::kernels {

/// Largest emb_dim of the host's fast rope (a row's coefficients and one slice live on the
/// stack).
inline constexpr std::int64_t kHostRopeMaxEmbDim = 512;

/// The rope slice of every DeepSeek MLA model (qk_rope_head_dim 64): 32 pairs.
inline constexpr std::int64_t kMlaHalfDim = 32;

/// One table row's coefficients, pair by pair (PairCoefficients as four runs of half_dim).
struct HostRowCoefficients {
  float cos_u[kHostRopeMaxEmbDim / 2];
  float cos_v[kHostRopeMaxEmbDim / 2];
  float p[kHostRopeMaxEmbDim / 2];
  float q[kHostRopeMaxEmbDim / 2];
};

/// One rope slice's pairs as floats: the u of each pair, then the v.
struct HostSlicePairs {
  float u[kHostRopeMaxEmbDim / 2];
  float v[kHostRopeMaxEmbDim / 2];
};

/// The coefficients of pairs 0 .. half_dim - 1 of table row `freq_row`.
inline void load_row_coefficients(const PairRotation& r, std::int64_t freq_row,
                                  std::int64_t half_dim, HostRowCoefficients& k) {
  for (std::int64_t i = 0; i < half_dim; ++i) {
    const PairCoefficients<1> c = load_coefficients<1>(r, freq_row, half_dim, i);
    k.cos_u[i] = c.cos_u[0];
    k.cos_v[i] = c.cos_v[0];
    k.p[i] = c.p[0];
    k.q[i] = c.q[0];
  }
}

/// The SIMD forms of a slice's runs the slice functions take by default: SSE2 where the host
/// compiler targets it (host_simd.h; host_kernels.cpp instantiates rope's fast branch with
/// Avx2Runs as well, compiled for AVX2), none in nvcc's host pass (no fast branch runs there).
#if defined(MLAROPE_HOST_SSE2)
using HostRuns = host_simd::Sse2Runs;
#else
struct HostRuns {
  static constexpr std::int64_t kRegisterSlicePairs = 0;
};
#endif

/// The pairs of `slice` (half_dim of them, stored in `layout`) as floats.
template <class Runs = HostRuns, class T>
MLAROPE_INLINE void read_slice(const T* slice, PairLayout layout, std::int64_t half_dim,
                               HostSlicePairs& x) {
  std::int64_t done = 0;  // pairs the SIMD forms convert: bf16, in whole steps
  if (layout == PairLayout::half) {
#if defined(MLAROPE_HOST_SSE2)
    if constexpr (std::is_same_v<T, BFloat16>) {
      done = half_dim - half_dim % Runs::kRunStep;
      Runs::bf16_run_to_floats(slice, done, x.u);
      Runs::bf16_run_to_floats(slice + half_dim, done, x.v);
    }
#endif
    MLAROPE_SIMD
    for (std::int64_t i = done; i < half_dim; ++i) x.u[i] = to_float(slice[i]);
    MLAROPE_SIMD
    for (std::int64_t i = done; i < half_dim; ++i) x.v[i] = to_float(slice[half_dim + i]);
    return;
  }
#if defined(MLAROPE_HOST_SSE2)
  if constexpr (std::is_same_v<T, BFloat16>) {
    done = half_dim - half_dim % Runs::kPairStep;
    Runs::bf16_pairs_to_floats(slice, done, x.u, x.v);
  }
#endif
  MLAROPE_SIMD
  for (std::int64_t i = done; i < half_dim; ++i) {
    x.u[i] = to_float(slice[2 * i]);
    x.v[i] = to_float(slice[2 * i + 1]);
  }
}

/// Rotate every pair of `x` (rotate() of pair_rotation.h, pair by pair).
MLAROPE_INLINE void rotate_slice(const HostRowCoefficients& k, std::int64_t half_dim,
                                 HostSlicePairs& x) {
  MLAROPE_SIMD
  for (std::int64_t i = 0; i < half_dim; ++i) {
    const float u = x.u[i], v = x.v[i];
    x.u[i] = u * k.cos_u[i] + v * k.p[i];
    x.v[i] = v * k.cos_v[i] + u * k.q[i];
  }
}

/// Store the pairs of `x` into `slice` in `layout`, rounded to T.
template <class Runs = HostRuns, class T>
MLAROPE_INLINE void write_slice(T* slice, PairLayout layout, std::int64_t half_dim,
                                const HostSlicePairs& x) {
  std::int64_t done = 0;  // pairs the SIMD forms convert: bf16, in whole steps
  if (layout == PairLayout::half) {
#if defined(MLAROPE_HOST_SSE2)
    if constexpr (std::is_same_v<T, BFloat16>) {
      done = half_dim - half_dim % Runs::kRunStep;
      Runs::floats_to_bf16_run(x.u, done, slice);
      Runs::floats_to_bf16_run(x.v, done, slice + half_dim);
    }
#endif
    MLAROPE_SIMD
    for (std::int64_t i = done; i < half_dim; ++i) slice[i] = from_float<T>(x.u[i]);
    MLAROPE_SIMD
    for (std::int64_t i = done; i < half_dim; ++i) slice[half_dim + i] = from_float<T>(x.v[i]);
    return;
  }
#if defined(MLAROPE_HOST_SSE2)
  if constexpr (std::is_same_v<T, BFloat16>) {
    done = half_dim - half_dim % Runs::kPairStep;
    Runs::floats_to_bf16_pairs(x.u, x.v, done, slice);
  }
#endif
  MLAROPE_SIMD
  for (std::int64_t i = done; i < half_dim; ++i) {
    slice[2 * i] = from_float<T>(x.u[i]);
    slice[2 * i + 1] = from_float<T>(x.v[i]);
  }
}

/// Rotate the `half_dim` pairs of the slice at `in` into `out` (`in` itself in place): read
/// whole, rotated, then stored, through `x`. A bf16 slice of Runs::kRegisterSlicePairs pairs
/// (kHalfDim, a constant) goes through registers instead where the Runs have that form
/// (Avx2Runs, Avx512Runs): the same values, but NaN results, which it leaves to the loops.
template <class Runs, std::int64_t kHalfDim, class T>
MLAROPE_INLINE void rotate_whole_slice(const HostRowCoefficients& k, const T* in,
                                       const PairRotation& r, std::int64_t half_dim,
                                       HostSlicePairs& x, T* out) {
  if constexpr (std::is_same_v<T, BFloat16> && kHalfDim != 0 &&
                kHalfDim == Runs::kRegisterSlicePairs) {
    if (Runs::rotate_bf16_slice(k, in, r.read_layout, out, r.write_layout)) return;
  }
  read_slice<Runs>(in, r.read_layout, half_dim, x);
  rotate_slice(k, half_dim, x);
  write_slice<Runs>(out, r.write_layout, half_dim, x);
}

}  // namespace mlarope::kernels
#endif
