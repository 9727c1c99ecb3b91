// SPDX-License-Identifier: Apache-2.0
// Reading and writing NumPy .npy files: format versions 1.0 and 2.0 for reading, 1.0 for writing;
// little-endian, C order, a handful of numeric dtypes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mlarope::npy {

/// Element types the reader and writer support (u16 is "<u2", used for raw bfloat16 bits).
enum class Dtype { f16, f32, f64, u16, i32, i64 };

/// Size of one element of `dtype` in bytes.
std::size_t dtype_size(Dtype dtype);

/// NumPy descriptor of `dtype`, e.g. "<f4".
std::string_view dtype_descr(Dtype dtype);

/// An n-dimensional array: element bytes in C order, little-endian.
struct Array {
  Dtype dtype = Dtype::f32;      ///< Element type.
  std::vector<int64_t> shape;    ///< Empty shape () is a scalar with one element.
  std::vector<std::byte> bytes;  ///< size() * dtype_size(dtype) bytes.

  /// Number of elements: the product of shape (1 for a scalar, -1 for a negative or overflowing
  /// shape, which read and make never produce).
  int64_t size() const;

  /// The element bytes viewed as T; T must match dtype in size.
  template <class T>
  T* data() {
    return reinterpret_cast<T*>(bytes.data());
  }

  /// The element bytes viewed as const T; T must match dtype in size.
  template <class T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
};

/// A malformed, unsupported or unreadable file; the message names the file and the reason.
class Error : public std::runtime_error {
 public:
  using runtime_error::runtime_error;
};

/// Reads the .npy file at `path`; throws Error.
Array read(const std::filesystem::path& path);

/// Parses the contents of a .npy file; `name_for_errors` prefixes error messages. Throws Error.
Array parse(std::string_view bytes, const std::string& name_for_errors);

/// Writes `array` to `path` through a temporary file in the same directory; throws Error.
void write(const std::filesystem::path& path, const Array& array);

/// The bytes of a version 1.0 .npy file holding `array`, as numpy.save writes them; throws Error.
std::string serialize(const Array& array);

/// A zero-filled array of `dtype` and `shape`; throws Error on a negative or overflowing shape.
Array make(Dtype dtype, std::vector<int64_t> shape);

}  // namespace mlarope::npy
