// SPDX-License-Identifier: Apache-2.0
#include "shapes.h"

namespace mlarope::bench {

std::string to_string(BenchOp op) {
  switch (op) {
    case BenchOp::rope: return "rope";
    case BenchOp::rope_inplace: return "rope_inplace";
    case BenchOp::rope_backward: return "rope_backward";
    case BenchOp::kv_split: return "kv_split";
    case BenchOp::kv_split_backward: return "kv_split_backward";
  }
  return "?";
}

std::int64_t minimum_bytes(BenchOp op, const Shape& s) {
  const std::int64_t e = static_cast<std::int64_t>(dtype_size(s.dtype));
  const std::int64_t rows = s.tokens, h = s.heads;
  const std::int64_t table = rows * s.emb_dim * 2 * 4;  // cos and sin rows, f32
  switch (op) {
    case BenchOp::rope:
    case BenchOp::rope_backward: return 2 * rows * h * (s.nope_dim + s.emb_dim) * e + table;
    case BenchOp::rope_inplace: return 2 * rows * h * s.emb_dim * e + table;
    case BenchOp::kv_split:  // read kv, k_pe; write key, value
      return (rows * h * (s.k_dim + s.v_dim) + rows * s.emb_dim + rows * h * (s.k_dim + s.emb_dim) +
              rows * h * s.v_dim) *
                 e +
             table;
    case BenchOp::kv_split_backward:  // read grad_key, grad_value; write grad_kv, grad_k_pe
      return (rows * h * (s.k_dim + s.emb_dim) + rows * h * s.v_dim +
              rows * h * (s.k_dim + s.v_dim) + rows * s.emb_dim) *
                 e +
             table;
  }
  return 0;
}

std::vector<std::int32_t> mixed_cu_seqlens(std::int64_t tokens) {
  // A few long sequences take half the tokens; the rest are short ones of 37..100 tokens.
  std::vector<std::int32_t> cu = {0};
  std::int64_t used = 0;
  for (int i = 0; i < 2 && used + tokens / 4 <= tokens; ++i)
    cu.push_back(static_cast<std::int32_t>(used += tokens / 4));
  for (std::int64_t len = 37; used < tokens; len = 37 + (len * 7) % 64) {
    used = std::min(tokens, used + len);
    cu.push_back(static_cast<std::int32_t>(used));
  }
  return cu;
}

std::vector<Shape> bench_shapes(bool full) {
  std::vector<Shape> shapes;
  const std::vector<std::int64_t> token_counts =
      full ? std::vector<std::int64_t>{1024, 4096, 16384} : std::vector<std::int64_t>{1024};
  for (const char* model : {"dsv3", "small"})
    for (TokenLayout layout : {TokenLayout::sbhd, TokenLayout::thd})
      for (std::int64_t tokens : token_counts)
        for (DType dtype : {DType::bf16, DType::f32}) {
          Shape s;
          s.model = model;
          s.layout = layout;
          s.tokens = tokens;
          s.heads = s.model == "dsv3" ? 128 : 16;
          s.nope_dim = 128, s.emb_dim = 64, s.k_dim = 128, s.v_dim = 128;
          s.dtype = dtype;
          if (layout == TokenLayout::thd) s.cu_seqlens = mixed_cu_seqlens(tokens);
          if (!full && (s.model == "small" || dtype == DType::f32) && layout == TokenLayout::thd)
            continue;
          shapes.push_back(s);
        }
  return shapes;
}

std::string shape_label(const Shape& s) {
  return s.model + "/" + std::string(mlarope::to_string(s.layout)) + "/T" +
         std::to_string(s.tokens) + "/" + std::string(mlarope::to_string(s.dtype));
}

}  // namespace mlarope::bench
