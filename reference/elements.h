// SPDX-License-Identifier: Apache-2.0
// Small helpers of the reference: typed element access, head addressing, a parallel loop.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#include "host_convert.h"
#include "mlarope/tensor.h"

namespace mlarope::reference {

/// Storage type of activations of dtype D, with exact loads and once-rounded stores.
template <DType D>
struct Element;
template <>
struct Element<DType::f32> {
  using Storage = float;
  static double load(float x) { return x; }
  static float store(double x) { return static_cast<float>(x); }
};
template <>
struct Element<DType::f16> {
  using Storage = std::uint16_t;
  static double load(std::uint16_t x) { return double_from_f16_bits(x); }
  static std::uint16_t store(double x) { return f16_bits_from_double(x); }
};
template <>
struct Element<DType::bf16> {
  using Storage = std::uint16_t;
  static double load(std::uint16_t x) { return double_from_bf16_bits(x); }
  static std::uint16_t store(double x) { return bf16_bits_from_double(x); }
};

/// Call f(std::integral_constant<DType, D>{}) for the runtime dtype.
template <class F>
void with_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f(std::integral_constant<DType, DType::f32>{}); break;
    case DType::f16: f(std::integral_constant<DType, DType::f16>{}); break;
    case DType::bf16: f(std::integral_constant<DType, DType::bf16>{}); break;
  }
}

/// Element offset of (row, head) in an activation view; rows are s * B + b (SBHD) or r (THD).
struct HeadIndexer {
  std::int64_t batch = 1;
  std::int64_t seq_stride = 0, batch_stride = 0, head_stride = 0;

  std::int64_t offset(std::int64_t row, std::int64_t head) const {
    return (row / batch) * seq_stride + (row % batch) * batch_stride + head * head_stride;
  }
};

/// The indexer of a [S, B, H, D] (rank 4) or [T, H, D] (rank 3) view.
inline HeadIndexer head_indexer(const ConstTensorView& v) {
  if (v.rank == 4) return {v.shape[1], v.strides[0], v.strides[1], v.strides[2]};
  return {1, v.strides[0], 0, v.strides[1]};
}

/// Byte pointer of element `offset` of a view.
inline const char* element_ptr(const ConstTensorView& v, std::int64_t offset) {
  return static_cast<const char*>(v.data) + offset * static_cast<std::int64_t>(dtype_size(v.dtype));
}
inline char* element_ptr(const TensorView& v, std::int64_t offset) {
  return static_cast<char*>(v.data) + offset * static_cast<std::int64_t>(dtype_size(v.dtype));
}

/// Copy `count` contiguous elements bit for bit.
inline void copy_elements(char* dst, const char* src, std::int64_t count, DType dtype) {
  if (count > 0) std::memcpy(dst, src, static_cast<std::size_t>(count) * dtype_size(dtype));
}

/// Run body(begin, end) over [0, count) split across the machine's cores.
void parallel_for(std::int64_t count, const std::function<void(std::int64_t, std::int64_t)>& body);

}  // namespace mlarope::reference
