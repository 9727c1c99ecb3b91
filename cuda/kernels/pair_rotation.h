// SPDX-License-Identifier: Apache-2.0
// The rotation of docs/semantics.md §3 on a chunk of kPairs consecutive logical pairs of one rope
// slice: reading the pairs in a layout, the coefficients from the table row, the rotation (forward
// or adjoint), writing the pairs in a layout. kPairs == 4 uses vector accesses, 1 scalar ones.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/element_io.h"
#include "kernels/float_convert.h"
#include "kernels/host_simd.h"
#include "kernels/kernel_args.h"
#include "kernels/portability.h"

namespace mlarope::kernels {

/// Pairs per chunk of the vector paths: one 16-byte piece of an interleaved slice (4 pairs of
/// f16 or bf16, 2 of f32), so that each access of a chunk (a 16-byte interleaved piece, or an
/// 8-byte run of u or v positions) lies next to the neighbouring chunk's: the lanes of a warp
/// taking consecutive chunks read and write contiguous memory.
template <class T>
inline constexpr int kVectorPairs = 8 / static_cast<int>(sizeof(T));

/// emb_dim of the vector paths is a multiple of this (whole chunks of every dtype).
inline constexpr std::int64_t kVectorEmbMultiple = 8;

/// The values of kPairs logical pairs (u, v) as floats.
template <int kPairs>
struct PairChunk {
  float u[kPairs];
  float v[kPairs];
};

/// kSlots pair chunks in a block's shared memory (the Shared of a phased body), read and
/// written through shared_load / shared_store, which the GPU model checks.
template <int kPairs, std::int64_t kSlots>
struct SharedChunks {
  float u[kSlots][kPairs];
  float v[kSlots][kPairs];

  MLAROPE_HD void store(std::int64_t n, const PairChunk<kPairs>& x) {
    MLAROPE_UNROLL
    for (int j = 0; j < kPairs; ++j) {
      shared_store(&u[n][j], x.u[j]);
      shared_store(&v[n][j], x.v[j]);
    }
  }
  MLAROPE_HD PairChunk<kPairs> load(std::int64_t n) {
    PairChunk<kPairs> x;
    MLAROPE_UNROLL
    for (int j = 0; j < kPairs; ++j) {
      x.u[j] = shared_load(&u[n][j]);
      x.v[j] = shared_load(&v[n][j]);
    }
    return x;
  }
};

/// Per pair: out_u = u * cos_u + v * p, out_v = v * cos_v + u * q (docs/semantics.md §3 and §4).
/// Forward: p = -sg s[tu], q = sg s[tv]. Adjoint: p = sg s[tv], q = -sg s[tu].
template <int kPairs>
struct PairCoefficients {
  float cos_u[kPairs];
  float cos_v[kPairs];
  float p[kPairs];
  float q[kPairs];
};

/// The coefficients of kSlots pair chunks in a block's shared memory, as two SharedChunks:
/// (cos_u, cos_v) and (p, q).
template <int kPairs, std::int64_t kSlots>
struct SharedCoefficients {
  SharedChunks<kPairs, kSlots> cosines;
  SharedChunks<kPairs, kSlots> sines;

  MLAROPE_HD void store(std::int64_t n, const PairCoefficients<kPairs>& k) {
    PairChunk<kPairs> c, t;
    MLAROPE_UNROLL
    for (int j = 0; j < kPairs; ++j) c.u[j] = k.cos_u[j], c.v[j] = k.cos_v[j];
    MLAROPE_UNROLL
    for (int j = 0; j < kPairs; ++j) t.u[j] = k.p[j], t.v[j] = k.q[j];
    cosines.store(n, c);
    sines.store(n, t);
  }
  MLAROPE_HD PairCoefficients<kPairs> load(std::int64_t n) {
    const PairChunk<kPairs> c = cosines.load(n), t = sines.load(n);
    PairCoefficients<kPairs> k;
    MLAROPE_UNROLL
    for (int j = 0; j < kPairs; ++j) k.cos_u[j] = c.u[j], k.cos_v[j] = c.v[j];
    MLAROPE_UNROLL
    for (int j = 0; j < kPairs; ++j) k.p[j] = t.u[j], k.q[j] = t.v[j];
    return k;
  }
};

/// Positions of logical pair i in a slice of `half_dim` pairs.
MLAROPE_HD MLAROPE_INLINE std::int64_t u_position(PairLayout layout, std::int64_t i,
                                                  std::int64_t half_dim) {
  (void)half_dim;
  return layout == PairLayout::half ? i : 2 * i;
}
MLAROPE_HD MLAROPE_INLINE std::int64_t v_position(PairLayout layout, std::int64_t i,
                                                  std::int64_t half_dim) {
  return layout == PairLayout::half ? i + half_dim : 2 * i + 1;
}

/// Pairs first .. first + kPairs - 1 of `slice`, stored in `layout`.
template <class T, int kPairs>
MLAROPE_HD MLAROPE_INLINE PairChunk<kPairs> load_pairs(const T* slice, PairLayout layout,
                                                       std::int64_t half_dim, std::int64_t first) {
  PairChunk<kPairs> c;
#if defined(MLAROPE_HOST_SSE2)
  if constexpr (std::is_same_v<T, BFloat16> && kPairs == 4) {
    if (!MLAROPE_DEVICE_PATHS()) {
      if (layout == PairLayout::half)
        host_simd::load_half(slice + first, slice + half_dim + first, c.u, c.v);
      else host_simd::load_interleaved(slice + 2 * first, c.u, c.v);
      return c;
    }
  }
#endif
  if constexpr (kPairs == 1) {
    c.u[0] = load_element(slice, u_position(layout, first, half_dim));
    c.v[0] = load_element(slice, v_position(layout, first, half_dim));
  } else if (layout == PairLayout::half) {
    load_vector<T, kPairs>(slice + first, c.u);
    load_vector<T, kPairs>(slice + half_dim + first, c.v);
  } else {
    float x[2 * kPairs];
    load_vector<T, 2 * kPairs>(slice + 2 * first, x);
    MLAROPE_SIMD
    for (int j = 0; j < kPairs; ++j) {
      c.u[j] = x[2 * j];
      c.v[j] = x[2 * j + 1];
    }
  }
  return c;
}

/// Pairs first .. first + kPairs - 1 of `slice` (a vector chunk: kPairs == kVectorPairs<T>) as
/// the raw bits loaded, the u run then the v run for the half layout: what a batch of loads
/// holds while it is in flight, in half the registers of a PairChunk for 16-bit types.
template <class T, int kPairs>
MLAROPE_HD MLAROPE_INLINE RawVector<16> load_pair_bits(const T* slice, PairLayout layout,
                                                       std::int64_t half_dim, std::int64_t first) {
  static_assert(kPairs == kVectorPairs<T>, "vector chunks only");
  if (layout == PairLayout::half) {
    const RawVector<8> u = load_raw<8>(slice + first);
    const RawVector<8> v = load_raw<8>(slice + half_dim + first);
    return {{u.words[0], u.words[1], v.words[0], v.words[1]}};
  }
  return load_raw<16>(slice + 2 * first);
}

/// load_pair_bits into shared memory by asynchronous copies (async_copy_to_shared): the same
/// bits at `to`, once the thread's wait_async_copies returns.
template <class T, int kPairs>
MLAROPE_HD MLAROPE_INLINE void copy_pair_bits_to_shared(RawVector<16>* to, const T* slice,
                                                        PairLayout layout, std::int64_t half_dim,
                                                        std::int64_t first) {
  static_assert(kPairs == kVectorPairs<T>, "vector chunks only");
  if (layout == PairLayout::half) {
    async_copy_to_shared<8>(to->words, slice + first);
    async_copy_to_shared<8>(to->words + 2, slice + half_dim + first);
    return;
  }
  async_copy_to_shared<16>(to, slice + 2 * first);
}

/// The pairs of bits load_pair_bits read in `layout`, as floats.
template <class T, int kPairs>
MLAROPE_HD MLAROPE_INLINE PairChunk<kPairs> pairs_of_bits(const RawVector<16>& bits,
                                                          PairLayout layout) {
  // Two loops, so that every element's place is a constant: an index chosen at run time
  // would put `bits` in local memory.
  PairChunk<kPairs> c;
  if (layout == PairLayout::half) {
    MLAROPE_UNROLL
    for (int j = 0; j < kPairs; ++j) {
      c.u[j] = piece_element<T, 16>(bits, j);
      c.v[j] = piece_element<T, 16>(bits, kPairs + j);
    }
  } else {
    MLAROPE_UNROLL
    for (int j = 0; j < kPairs; ++j) {
      c.u[j] = piece_element<T, 16>(bits, 2 * j);
      c.v[j] = piece_element<T, 16>(bits, 2 * j + 1);
    }
  }
  return c;
}

/// Store pairs first .. first + kPairs - 1 into `slice` in `layout`, rounded to T.
template <class T, int kPairs>
MLAROPE_HD MLAROPE_INLINE void store_pairs(T* slice, PairLayout layout, std::int64_t half_dim,
                                           std::int64_t first, const PairChunk<kPairs>& c) {
#if defined(MLAROPE_HOST_SSE2)
  if constexpr (std::is_same_v<T, BFloat16> && kPairs == 4) {
    if (!MLAROPE_DEVICE_PATHS()) {
      if (layout == PairLayout::half)
        host_simd::store_half(slice + first, slice + half_dim + first, c.u, c.v);
      else host_simd::store_interleaved(slice + 2 * first, c.u, c.v);
      return;
    }
  }
#endif
  if constexpr (kPairs == 1) {
    store_element(slice, u_position(layout, first, half_dim), c.u[0]);
    store_element(slice, v_position(layout, first, half_dim), c.v[0]);
  } else if (layout == PairLayout::half) {
    store_vector<T, kPairs>(slice + first, c.u);
    store_vector<T, kPairs>(slice + half_dim + first, c.v);
  } else {
    float x[2 * kPairs];
    MLAROPE_SIMD
    for (int j = 0; j < kPairs; ++j) {
      x[2 * j] = c.u[j];
      x[2 * j + 1] = c.v[j];
    }
    store_vector<T, 2 * kPairs>(slice + 2 * first, x);
  }
}

/// load_coefficients, with table reads shown to the GPU model or not (kObserved).
template <int kPairs, bool kObserved>
MLAROPE_HD MLAROPE_INLINE PairCoefficients<kPairs> coefficients_from_table(const PairRotation& r,
                                                                           std::int64_t freq_row,
                                                                           std::int64_t half_dim,
                                                                           std::int64_t first) {
  PairCoefficients<kPairs> k;
  const float sign = r.sign;
  if constexpr (kPairs > 1 && kObserved) {
    if (r.table_vector) {  // four runs of kPairs floats: a warp's lanes read contiguous memory
      const float* cos_row = static_cast<const float*>(r.cos.data) + freq_row * r.cos.row_stride;
      const float* sin_row = static_cast<const float*>(r.sin.data) + freq_row * r.sin.row_stride;
      float sin_u[kPairs], sin_v[kPairs];
      load_vector<float, kPairs>(cos_row + first, k.cos_u);
      load_vector<float, kPairs>(cos_row + half_dim + first, k.cos_v);
      load_vector<float, kPairs>(sin_row + first, sin_u);
      load_vector<float, kPairs>(sin_row + half_dim + first, sin_v);
      MLAROPE_UNROLL
      for (int j = 0; j < kPairs; ++j) {
        k.p[j] = r.adjoint ? sign * sin_v[j] : -(sign * sin_u[j]);
        k.q[j] = r.adjoint ? -(sign * sin_u[j]) : sign * sin_v[j];
      }
      return k;
    }
  }
  const std::int64_t cos_row = freq_row * r.cos.row_stride;
  const std::int64_t sin_row = freq_row * r.sin.row_stride;
  MLAROPE_SIMD
  for (int j = 0; j < kPairs; ++j) {
    const std::int64_t tu = u_position(r.table_layout, first + j, half_dim);
    const std::int64_t tv = v_position(r.table_layout, first + j, half_dim);
    k.cos_u[j] = load_table_element<kObserved>(r.cos.data, r.table_dtype, cos_row + tu);
    k.cos_v[j] = load_table_element<kObserved>(r.cos.data, r.table_dtype, cos_row + tv);
    const float sin_u =
        sign * load_table_element<kObserved>(r.sin.data, r.table_dtype, sin_row + tu);
    const float sin_v =
        sign * load_table_element<kObserved>(r.sin.data, r.table_dtype, sin_row + tv);
    k.p[j] = r.adjoint ? sin_v : -sin_u;
    k.q[j] = r.adjoint ? -sin_u : sin_v;
  }
  return k;
}

/// The coefficients of pairs first .. first + kPairs - 1 from table row `freq_row`.
/// NOTE: the host's fast mode reads them past the GPU model (no model is active there): a
/// check per table element would keep the host compiler from vectorizing the loop.
template <int kPairs>
MLAROPE_HD MLAROPE_INLINE PairCoefficients<kPairs> load_coefficients(const PairRotation& r,
                                                                     std::int64_t freq_row,
                                                                     std::int64_t half_dim,
                                                                     std::int64_t first) {
#if !defined(__CUDA_ARCH__)
  if (!MLAROPE_DEVICE_PATHS())
    return coefficients_from_table<kPairs, false>(r, freq_row, half_dim, first);
#endif
  return coefficients_from_table<kPairs, true>(r, freq_row, half_dim, first);
}

/// The rotated (or adjoint-rotated) chunk.
template <int kPairs>
MLAROPE_HD MLAROPE_INLINE PairChunk<kPairs> rotate(const PairChunk<kPairs>& x,
                                                   const PairCoefficients<kPairs>& k) {
  PairChunk<kPairs> y;
  MLAROPE_SIMD
  for (int j = 0; j < kPairs; ++j) {
    y.u[j] = x.u[j] * k.cos_u[j] + x.v[j] * k.p[j];
    y.v[j] = x.v[j] * k.cos_v[j] + x.u[j] * k.q[j];
  }
  return y;
}

}  // namespace mlarope::kernels
