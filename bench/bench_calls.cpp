// SPDX-License-Identifier: Apache-2.0
#include "bench_calls.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "host_convert.h"

namespace mlarope::bench {

// `count` random values in [-1, 1]: a tile of 64 Ki values repeated (filling is not timed,
// but it runs for every shape, so it must be quick).
Bytes random_bytes(std::int64_t count, DType dtype, std::uint32_t seed) {
  constexpr std::int64_t kTile = 1 << 16;
  const std::size_t size = dtype_size(dtype);
  std::vector<std::byte> tile(kTile * size);
  Bytes v(count * size);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  for (std::int64_t i = 0; i < kTile; ++i) store_rounded(tile.data(), dtype, i, dist(rng));
  for (std::int64_t i = 0; i < count; i += kTile)
    std::memcpy(v.data() + i * size, tile.data(), std::min(kTile, count - i) * size);
  return v;
}

Fixture::Fixture(const Shape& shape)
    : s(shape), cu(shape.cu_seqlens.begin(), shape.cu_seqlens.end()) {
  const std::int64_t rows = s.tokens, table_rows = s.tokens;
  a = random_bytes(rows * s.heads * (s.nope_dim + s.emb_dim + s.k_dim + s.v_dim), s.dtype, 1);
  b = random_bytes(rows * s.heads * (s.nope_dim + s.emb_dim + s.k_dim + s.v_dim), s.dtype, 2);
  k_pe = random_bytes(rows * s.emb_dim, s.dtype, 3);
  out2 = random_bytes(rows * s.heads * s.v_dim, s.dtype, 4);
  cos.resize(table_rows * s.emb_dim);
  sin.resize(table_rows * s.emb_dim);
  for (std::int64_t p = 0; p < table_rows; ++p)
    for (std::int64_t k = 0; k < s.emb_dim; ++k) {
      const double angle = p * std::pow(10000.0, -2.0 * (k % (s.emb_dim / 2)) / s.emb_dim);
      cos[p * s.emb_dim + k] = static_cast<float>(std::cos(angle));
      sin[p * s.emb_dim + k] = static_cast<float>(std::sin(angle));
    }
}

Rotation Fixture::rotation() const {
  Rotation r;  // Megatron's MLA mode
  r.cos = contiguous_view<const void>(cos.data(), DType::f32, {s.tokens, s.emb_dim});
  r.sin = contiguous_view<const void>(sin.data(), DType::f32, {s.tokens, s.emb_dim});
  return r;
}

Positions Fixture::positions() const {
  Positions p;
  p.layout = s.layout;
  if (s.layout == TokenLayout::thd) {
    p.cu_seqlens = {cu.data(), IndexType::i32, static_cast<std::int64_t>(cu.size())};
    p.max_seqlen = s.tokens;
  }
  return p;
}

std::size_t Fixture::bytes() const {
  return a.size() + b.size() + k_pe.size() + out2.size() +
         (cos.size() + sin.size()) * sizeof(float) + cu.size() * sizeof(std::int32_t);
}

// The call of `op`, made once and then run in the timing loop.
std::function<void()> make_call(BenchOp op, Fixture& f, const harness::Backend& backend) {
  const Shape& s = f.s;
  const std::int64_t d = s.nope_dim + s.emb_dim;
  switch (op) {
    case BenchOp::rope: {
      const RopeCall c{f.heads_view<const void>(f.a.data(), s.heads, d),
                       f.heads_view<void>(f.b.data(), s.heads, d), f.rope_args()};
      return [=] { backend.rope(c); };
    }
    case BenchOp::rope_inplace: {
      const RopeInplaceCall c{f.heads_view<void>(f.a.data(), s.heads, d), f.rope_args()};
      return [=] { backend.rope_inplace(c); };
    }
    case BenchOp::rope_backward: {
      const RopeBackwardCall c{f.heads_view<const void>(f.a.data(), s.heads, d),
                               f.heads_view<void>(f.b.data(), s.heads, d), f.rope_args()};
      return [=] { backend.rope_backward(c); };
    }
    case BenchOp::kv_split: {
      const KvSplitCall c{f.heads_view<const void>(f.a.data(), s.heads, s.k_dim + s.v_dim),
                          f.heads_view<const void>(f.k_pe.data(), 1, s.emb_dim),
                          f.heads_view<void>(f.b.data(), s.heads, s.k_dim + s.emb_dim),
                          f.heads_view<void>(f.out2.data(), s.heads, s.v_dim), f.kv_args()};
      return [=] { backend.kv_split(c); };
    }
    case BenchOp::kv_split_backward: {
      const KvSplitBackwardCall c{f.heads_view<const void>(f.a.data(), s.heads,
                                                           s.k_dim + s.emb_dim),
                                  f.heads_view<const void>(f.out2.data(), s.heads, s.v_dim),
                                  f.heads_view<void>(f.b.data(), s.heads, s.k_dim + s.v_dim),
                                  f.heads_view<void>(f.k_pe.data(), 1, s.emb_dim), f.kv_args()};
      return [=] { backend.kv_split_backward(c); };
    }
  }
  return [] {};
}

}  // namespace mlarope::bench
