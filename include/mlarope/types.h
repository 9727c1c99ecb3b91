// SPDX-License-Identifier: Apache-2.0
// Element types, pair layouts and the small enums of docs/semantics.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mlarope {

/// Element type of activations and tables (docs/semantics.md §1).
enum class DType : std::uint8_t { f32, f16, bf16 };

/// Element type of integer metadata (`cu_seqlens`, `position_ids`, `seq_offsets`).
enum class IndexType : std::uint8_t { i32, i64 };

/// Where logical pair i of a rope slice lives (docs/semantics.md §3).
enum class PairLayout : std::uint8_t {
  half,        ///< (i, i + d/2)
  interleaved  ///< (2i, 2i + 1)
};

/// Token layout of activations: [S, B, H, D] or packed [T, H, D] (docs/semantics.md §1).
enum class TokenLayout : std::uint8_t { sbhd, thd };

/// The four operations (docs/semantics.md §4), whatever their form: rope and rope_backward
/// out of place or in place, kv_split and kv_split_backward. The one op enum of the library:
/// case files, the fuzz, the command line, plugins and the Python package all spell it here.
enum class Op : std::uint8_t { rope, rope_backward, kv_split, kv_split_backward };

/// Which table row a THD row starts from (docs/semantics.md §2).
enum class FreqMode : std::uint8_t {
  per_sequence,  ///< every sequence starts at table row 0
  packed         ///< the table covers the whole packed batch: row cu_seqlens[i] + position
};

/// Size in bytes of one element.
constexpr std::size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }
/// Size in bytes of one index.
constexpr std::size_t index_size(IndexType t) { return t == IndexType::i32 ? 4 : 8; }

/// The spelling of each enum value (docs/semantics.md) ("bf16", "interleaved", "thd", "packed",
/// ...).
std::string_view to_string(DType t);
std::string_view to_string(IndexType t);
std::string_view to_string(PairLayout l);
std::string_view to_string(TokenLayout l);
std::string_view to_string(FreqMode m);
std::string_view to_string(Op op);

/// Parse that spelling; throws mlarope::Error naming `what` and the value on failure.
DType parse_dtype(std::string_view s, std::string_view what = "dtype");
PairLayout parse_pair_layout(std::string_view s, std::string_view what = "layout");
TokenLayout parse_token_layout(std::string_view s, std::string_view what = "layout");
FreqMode parse_freq_mode(std::string_view s, std::string_view what = "freq_mode");
Op parse_op(std::string_view s, std::string_view what = "op");

/// A shape (or a view's strides) as the library's messages print it: "[2, 3, 64]".
std::string shape_string(const std::int64_t* shape, int rank);
inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  return shape_string(shape.data(), static_cast<int>(shape.size()));
}

}  // namespace mlarope
