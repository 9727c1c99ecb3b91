// SPDX-License-Identifier: Apache-2.0
// Strided tensor views: what every primitive reads and writes (docs/semantics.md §1).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

#include "mlarope/types.h"

namespace mlarope {

/// Largest rank a view may have: [S, B, H, D].
inline constexpr int kMaxRank = 4;

/// A strided view of elements of one DType. Strides are in elements; any stride may be zero
/// (a broadcast view). `Void` is `void` for outputs and `const void` for inputs.
template <class Void>
struct BasicTensorView {
  Void* data = nullptr;
  DType dtype = DType::f32;
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};

  /// Number of elements (1 for rank 0); 0 whenever a dimension is 0, however large the others.
  std::int64_t numel() const {
    for (int i = 0; i < rank; ++i)
      if (shape[i] == 0) return 0;
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
  /// Size of dimension i; negative i counts from the end.
  std::int64_t size(int i) const { return shape[i < 0 ? rank + i : i]; }
  /// Stride of dimension i; negative i counts from the end.
  std::int64_t stride(int i) const { return strides[i < 0 ? rank + i : i]; }
  /// Element offset of an index tuple of length `rank`.
  std::int64_t offset(std::initializer_list<std::int64_t> index) const {
    std::int64_t off = 0;
    int i = 0;
    for (std::int64_t x : index) off += x * strides[i++];
    return off;
  }

  /// An input view of the same memory.
  operator BasicTensorView<const void>() const {
    return BasicTensorView<const void>{data, dtype, rank, shape, strides};
  }
};

/// A view that a primitive writes (an output, or the tensor of an in-place call).
using TensorView = BasicTensorView<void>;
/// A view that a primitive only reads.
using ConstTensorView = BasicTensorView<const void>;

/// A contiguous (C order) view of `shape`.
template <class Void>
BasicTensorView<Void> contiguous_view(Void* data, DType dtype,
                                      std::initializer_list<std::int64_t> shape) {
  BasicTensorView<Void> v;
  v.data = data;
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  int i = 0;
  for (std::int64_t s : shape) v.shape[i++] = s;
  std::int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride *= v.shape[d];
  }
  return v;
}

/// A contiguous 1-D array of indices in device memory (host memory on the host backend).
struct IndexView {
  const void* data = nullptr;
  IndexType type = IndexType::i32;
  std::int64_t size = 0;

  /// True when the array was given.
  bool present() const { return data != nullptr; }
};

}  // namespace mlarope
