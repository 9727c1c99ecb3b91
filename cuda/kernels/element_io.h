// SPDX-License-Identifier: Apache-2.0
// Loads and stores of activation and table elements, as floats, for kernel bodies: scalar
// accesses, aligned vector accesses (the fast paths), and table reads with a runtime dtype.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/float_convert.h"
#include "kernels/portability.h"
#include "mlarope/types.h"

namespace mlarope::kernels {

/// Element `index` of `p` as a float.
template <class T>
MLAROPE_HD MLAROPE_INLINE float load_element(const T* p, std::int64_t index) {
  return to_float(global_load(p + index));
}

/// Store `x`, rounded to nearest even, into element `index` of `p`.
template <class T>
MLAROPE_HD MLAROPE_INLINE void store_element(T* p, std::int64_t index, float x) {
  global_store(p + index, from_float<T>(x));
}

/// Bytes of one vector piece of K elements of T: at most 16 (one 128-bit access).
template <class T, int K>
MLAROPE_HD constexpr int vector_piece_bytes() {
  return static_cast<int>(sizeof(T)) * K < 16 ? static_cast<int>(sizeof(T)) * K : 16;
}

/// Element j of a vector piece, as a float.
template <class T, int kBytes>
MLAROPE_HD MLAROPE_INLINE float piece_element(const RawVector<kBytes>& r, int j) {
  if constexpr (sizeof(T) == 4) {
    return float_from_bits(r.words[j]);
  } else {
    const std::uint16_t bits = static_cast<std::uint16_t>(r.words[j / 2] >> (16 * (j % 2)));
    return to_float(T{bits});
  }
}

/// Set element j of a vector piece to `x` rounded to T.
template <class T, int kBytes>
MLAROPE_HD MLAROPE_INLINE void set_piece_element(RawVector<kBytes>& r, int j, float x) {
  if constexpr (sizeof(T) == 4) {
    r.words[j] = float_bits(x);
  } else {
    const std::uint32_t bits = from_float<T>(x).bits;
    const int shift = 16 * (j % 2);
    r.words[j / 2] = (r.words[j / 2] & ~(0xffffu << shift)) | (bits << shift);
  }
}

/// K contiguous elements starting at `p`, with aligned vector loads.
/// NOTE: `p` must be aligned to vector_piece_bytes<T, K>() (checked at dispatch).
template <class T, int K>
MLAROPE_HD MLAROPE_INLINE void load_vector(const T* p, float (&out)[K]) {
#if !defined(__CUDA_ARCH__)
  if (!MLAROPE_DEVICE_PATHS()) {  // host fast mode: one copy, then SIMD conversions
    T elements[K];
    std::memcpy(elements, p, sizeof elements);
    MLAROPE_SIMD
    for (int j = 0; j < K; ++j) out[j] = to_float(elements[j]);
    return;
  }
#endif
  constexpr int kBytes = vector_piece_bytes<T, K>();
  constexpr int kPerPiece = kBytes / static_cast<int>(sizeof(T));
  MLAROPE_UNROLL
  for (int piece = 0; piece < K / kPerPiece; ++piece) {
    const RawVector<kBytes> r = load_raw<kBytes>(p + piece * kPerPiece);
    MLAROPE_UNROLL
    for (int j = 0; j < kPerPiece; ++j) out[piece * kPerPiece + j] = piece_element<T, kBytes>(r, j);
  }
}

/// Store K floats, rounded to T, as contiguous elements at `p` with aligned vector stores.
template <class T, int K>
MLAROPE_HD MLAROPE_INLINE void store_vector(T* p, const float (&in)[K]) {
#if !defined(__CUDA_ARCH__)
  if (!MLAROPE_DEVICE_PATHS()) {  // host fast mode: SIMD conversions, then one copy
    T elements[K];
    MLAROPE_SIMD
    for (int j = 0; j < K; ++j) elements[j] = from_float<T>(in[j]);
    std::memcpy(p, elements, sizeof elements);
    return;
  }
#endif
  constexpr int kBytes = vector_piece_bytes<T, K>();
  constexpr int kPerPiece = kBytes / static_cast<int>(sizeof(T));
  MLAROPE_UNROLL
  for (int piece = 0; piece < K / kPerPiece; ++piece) {
    RawVector<kBytes> r{};
    MLAROPE_UNROLL
    for (int j = 0; j < kPerPiece; ++j)
      set_piece_element<T, kBytes>(r, j, in[piece * kPerPiece + j]);
    store_raw<kBytes>(p + piece * kPerPiece, r);
  }
}

/// A table (cos or sin) row-major with a free row stride; its dtype is a runtime value.
struct TableView {
  const void* data = nullptr;
  std::int64_t row_stride = 0;  ///< elements between table rows
};

/// Element `index` of a table of runtime dtype `dtype`, as a float. kObserved = false reads
/// past the GPU model: only for host fast-mode paths (see load_coefficients).
template <bool kObserved = true>
MLAROPE_HD MLAROPE_INLINE float load_table_element(const void* base, DType dtype,
                                                   std::int64_t index) {
  if constexpr (!kObserved) {
    switch (dtype) {
      case DType::f16: return to_float(static_cast<const Half*>(base)[index]);
      case DType::bf16: return to_float(static_cast<const BFloat16*>(base)[index]);
      default: return static_cast<const float*>(base)[index];
    }
  }
  switch (dtype) {
    case DType::f16: return to_float(global_load(static_cast<const Half*>(base) + index));
    case DType::bf16: return to_float(global_load(static_cast<const BFloat16*>(base) + index));
    default: return global_load(static_cast<const float*>(base) + index);
  }
}

}  // namespace mlarope::kernels
