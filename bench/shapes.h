// SPDX-License-Identifier: Apache-2.0
// Benchmark shapes and the minimum memory traffic of each op (the performance model of
// docs/architecture.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlarope/types.h"

namespace mlarope::bench {

/// The benchmarked operations: rope and rope_backward out of place or in place, kv ops.
enum class BenchOp { rope, rope_inplace, rope_backward, kv_split, kv_split_backward };

/// One benchmark shape.
struct Shape {
  std::string model;  ///< "dsv3" (H=128) or "small" (H=16)
  TokenLayout layout = TokenLayout::sbhd;
  std::int64_t tokens = 0;  ///< S (B = 1) or T
  std::int64_t heads = 0, nope_dim = 0, emb_dim = 0, k_dim = 0, v_dim = 0;
  std::vector<std::int32_t> cu_seqlens;  ///< THD
  DType dtype = DType::bf16;
};

/// The name of a benchmarked op (docs/semantics.md §4).
std::string to_string(BenchOp op);

/// Bytes each input is read once and each output written once: in place only the rope slices;
/// table rows once per row (f32 tables).
std::int64_t minimum_bytes(BenchOp op, const Shape& s);

/// THD sequence lengths: many short ones and a few long ones, adding up to `tokens`.
std::vector<std::int32_t> mixed_cu_seqlens(std::int64_t tokens);

/// The shapes of the smoke set (seconds) or the full set (T from 1K to 16K).
std::vector<Shape> bench_shapes(bool full);

/// "dsv3/sbhd/T4096/bf16".
std::string shape_label(const Shape& s);

}  // namespace mlarope::bench
