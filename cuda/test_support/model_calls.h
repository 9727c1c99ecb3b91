// SPDX-License-Identifier: Apache-2.0
// Small fixed calls for the GPU model's tests (gpu_model_test, launch_alignment_test): bf16
// activations in one 64-byte-aligned arena, where a test can shift one tensor by an element
// to misalign it, f32 tables, deterministic values.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "mlarope/ops.h"

namespace mlarope::test {

/// bf16 elements with a 64-byte-aligned base; regions are element offsets.
class Bf16Arena {
 public:
  explicit Bf16Arena(std::int64_t elements) : storage_(static_cast<std::size_t>(elements + 32), 0) {
    auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
    base_ = static_cast<std::int64_t>((64 - address % 64) % 64 / 2);
    for (std::int64_t i = 0; i < elements; ++i)  // values in [-1, 1): bf16 bits of a float
      at(i) = static_cast<std::uint16_t>((0x3c00u + static_cast<std::uint16_t>((i * 37) % 256)) |
                                         ((i & 1) ? 0x8000u : 0u));
  }
  std::uint16_t& at(std::int64_t i) { return storage_[static_cast<std::size_t>(base_ + i)]; }
  /// A view of `shape` (C order over `row_elements`-wide rows) starting at element `offset`.
  TensorView view(std::int64_t offset, std::vector<std::int64_t> shape,
                  std::vector<std::int64_t> strides) {
    TensorView v;
    v.data = &at(offset);
    v.dtype = DType::bf16;
    v.rank = static_cast<int>(shape.size());
    for (int d = 0; d < v.rank; ++d) {
      v.shape[static_cast<std::size_t>(d)] = shape[static_cast<std::size_t>(d)];
      v.strides[static_cast<std::size_t>(d)] = strides[static_cast<std::size_t>(d)];
    }
    return v;
  }

 private:
  std::vector<std::uint16_t> storage_;
  std::int64_t base_ = 0;
};

/// f32 cos/sin tables [rows, emb] of unit rotations.
struct UnitTables {
  UnitTables(std::int64_t rows, std::int64_t emb)
      : cos(static_cast<std::size_t>(rows * emb)), sin(static_cast<std::size_t>(rows * emb)),
        rows(rows), emb(emb) {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < emb; ++j) {
        const float angle =
            0.1f * static_cast<float>(r + 1) * static_cast<float>(j % (emb / 2) + 1);
        cos[static_cast<std::size_t>(r * emb + j)] = __builtin_cosf(angle);
        sin[static_cast<std::size_t>(r * emb + j)] = __builtin_sinf(angle);
      }
  }
  Rotation rotation(PairLayout in, PairLayout out) const {
    Rotation r;
    r.in_layout = in;
    r.out_layout = out;
    r.table_layout = PairLayout::half;
    r.cos = contiguous_view<const void>(cos.data(), DType::f32, {rows, emb});
    r.sin = contiguous_view<const void>(sin.data(), DType::f32, {rows, emb});
    return r;
  }
  std::vector<float> cos, sin;
  std::int64_t rows, emb;
};

/// rope, SBHD S=4 B=1, H heads (8), nope (24: rows of 176 bytes; a multiple of 8 keeps rows
/// 16-byte aligned), emb 64, MLA layouts. With `misalign_t`, t starts one element (2 bytes)
/// past an aligned address; out stays aligned.
class RopeBuffers {
 public:
  static constexpr std::int64_t S = 4, kEmb = 64;
  explicit RopeBuffers(bool misalign_t, std::int64_t heads = 8, std::int64_t nope_dim = 24)
      : H(heads), nope(nope_dim), D(nope_dim + kEmb), arena_(2 * S * H * D + 64), tables_(S, kEmb),
        t_offset_(misalign_t ? 1 : 0) {}
  const std::int64_t H, nope, D;

  RopeArgs args() const {
    RopeArgs a;
    a.nope_dim = nope;
    a.emb_dim = kEmb;
    a.rotation = tables_.rotation(PairLayout::interleaved, PairLayout::half);
    return a;
  }
  TensorView t() { return arena_.view(t_offset_, {S, 1, H, D}, {H * D, H * D, D, 1}); }
  TensorView out() { return arena_.view(S * H * D + 32, {S, 1, H, D}, {H * D, H * D, D, 1}); }
  RopeCall call() { return {t(), out(), args()}; }
  RopeInplaceCall inplace_call() { return {t(), args()}; }
  /// The bits of out, in order.
  std::vector<std::uint16_t> out_bits() {
    std::vector<std::uint16_t> bits;
    for (std::int64_t i = 0; i < S * H * D; ++i) bits.push_back(arena_.at(S * H * D + 32 + i));
    return bits;
  }

 private:
  Bf16Arena arena_;
  UnitTables tables_;
  std::int64_t t_offset_;
};

/// kv_split, SBHD S=3 B=1 H=4, k 16, v 24, emb 64, every tensor dense and aligned; `value` is
/// the last tensor of the arena, followed by guard elements.
class KvSplitBuffers {
 public:
  static constexpr std::int64_t S = 3, H = 4, K = 16, V = 24, kEmb = 64;
  static constexpr std::int64_t kKv = 0, kKpe = kKv + S * H * (K + V), kKey = kKpe + S * kEmb,
                                kValue = kKey + S * H * (K + kEmb), kGuard = kValue + S * H * V;
  static constexpr std::uint16_t kGuardBits = 0x7fa5;

  KvSplitBuffers() : arena_(kGuard + 16), tables_(S, kEmb) {
    for (std::int64_t i = 0; i < 16; ++i) arena_.at(kGuard + i) = kGuardBits;
  }
  KvSplitCall call() {
    KvSplitCall c;
    c.kv = arena_.view(kKv, {S, 1, H, K + V}, {H * (K + V), H * (K + V), K + V, 1});
    c.k_pe = arena_.view(kKpe, {S, 1, 1, kEmb}, {kEmb, kEmb, kEmb, 1});
    c.key = arena_.view(kKey, {S, 1, H, K + kEmb}, {H * (K + kEmb), H * (K + kEmb), K + kEmb, 1});
    c.value = arena_.view(kValue, {S, 1, H, V}, {H * V, H * V, V, 1});
    c.args.k_dim = K;
    c.args.v_dim = V;
    c.args.emb_dim = kEmb;
    c.args.rotation = tables_.rotation(PairLayout::interleaved, PairLayout::half);
    return c;
  }
  /// The guard elements after `value` hold what they held.
  bool guard_intact() {
    for (std::int64_t i = 0; i < 16; ++i)
      if (arena_.at(kGuard + i) != kGuardBits) return false;
    return true;
  }

 private:
  Bf16Arena arena_;
  UnitTables tables_;
};

}  // namespace mlarope::test
