// SPDX-License-Identifier: Apache-2.0
// The dispatcher: fast paths only for Megatron's modes, emb_dim % 8 == 0 and aligned memory;
// in-place layout changes take a whole-slice variant; nothing else is dropped.
#include <gtest/gtest.h>

#include <vector>

#include "launch/dispatch.h"

namespace mlarope::detail {
namespace {

constexpr PairLayout H = PairLayout::half, I = PairLayout::interleaved;

std::vector<LayoutTriple> all_triples() {
  std::vector<LayoutTriple> out;
  for (PairLayout in : {H, I})
    for (PairLayout o : {H, I})
      for (PairLayout t : {H, I}) out.push_back({in, o, t});
  return out;
}

TEST(Dispatch, MegatronModesAreTheFourOfTheSpec) {
  int count = 0;
  for (const LayoutTriple& t : all_triples()) count += is_megatron_mode(t);
  EXPECT_EQ(count, 4);
  EXPECT_TRUE(is_megatron_mode({I, H, H}));
  EXPECT_TRUE(is_megatron_mode({I, I, H}));
  EXPECT_TRUE(is_megatron_mode({H, H, H}));
  EXPECT_TRUE(is_megatron_mode({I, I, I}));
  EXPECT_FALSE(is_megatron_mode({H, I, H}));
}

TEST(Dispatch, OutOfPlaceFastPathNeedsMegatronModeEmbDimAndAlignment) {
  for (const LayoutTriple& t : all_triples())
    for (std::int64_t emb : {2, 6, 8, 12, 16, 64, 72, 128})
      for (bool aligned : {false, true}) {
        const RopeVariant v = choose_rope_variant({emb, t, false, aligned});
        const bool fast = is_megatron_mode(t) && emb % 8 == 0 && aligned;
        EXPECT_EQ(v, fast ? RopeVariant::chunked_vector : RopeVariant::chunked_scalar)
            << "emb " << emb << " aligned " << aligned;
      }
}

TEST(Dispatch, InPlaceLayoutChangeOwnsWholeSlices) {
  EXPECT_EQ(choose_rope_variant({64, {I, H, H}, true, true}), RopeVariant::staged_vector);
  EXPECT_EQ(choose_rope_variant({512, {I, H, H}, true, true}), RopeVariant::staged_vector);
  EXPECT_EQ(choose_rope_variant({520, {I, H, H}, true, true}), RopeVariant::whole_slice_scalar);
  EXPECT_EQ(choose_rope_variant({64, {I, H, H}, true, false}), RopeVariant::whole_slice_scalar);
  EXPECT_EQ(choose_rope_variant({12, {I, H, H}, true, true}), RopeVariant::whole_slice_scalar);
  EXPECT_EQ(choose_rope_variant({64, {H, I, H}, true, true}), RopeVariant::whole_slice_scalar);
  EXPECT_EQ(choose_rope_variant({64, {I, I, H}, true, true}), RopeVariant::chunked_vector);
  EXPECT_EQ(choose_rope_variant({64, {H, H, I}, true, true}), RopeVariant::chunked_scalar);
}

TEST(Dispatch, KvSplitFastPath) {
  EXPECT_EQ(choose_kv_variant({64, {I, H, H}, true}), KvVariant::vector);
  EXPECT_EQ(choose_kv_variant({64, {I, H, H}, false}), KvVariant::scalar);
  EXPECT_EQ(choose_kv_variant({60, {I, H, H}, true}), KvVariant::scalar);
  EXPECT_EQ(choose_kv_variant({64, {H, I, I}, true}), KvVariant::scalar);
}

TEST(Dispatch, AlignedViewChecksBaseStartAndStrides) {
  alignas(16) static std::uint16_t buffer[4096];
  ConstTensorView v = contiguous_view<const void>(buffer, DType::bf16, {4, 2, 3, 24});
  EXPECT_TRUE(aligned_view(v, 0, 16));
  EXPECT_TRUE(aligned_view(v, 16, 16));
  EXPECT_FALSE(aligned_view(v, 4, 16));
  v.strides[2] = 20;  // 40 bytes between heads
  EXPECT_FALSE(aligned_view(v, 0, 16));
  v.shape[2] = 1;  // a stride of a size-1 dim does not matter
  EXPECT_TRUE(aligned_view(v, 0, 16));
  v.data = buffer + 1;
  EXPECT_FALSE(aligned_view(v, 0, 16));
  EXPECT_TRUE(aligned_view(v, 7, 16));
}

}  // namespace
}  // namespace mlarope::detail

// The launch builder applies the dispatcher to real views: Megatron-shaped calls take the
// fast paths, an odd head stride or a misaligned slice start takes the general one.
#include "launch/launch_builder.h"

namespace mlarope::detail {
namespace {

struct Buffers {
  alignas(64) std::uint16_t t[4 * 3 * 200]{};
  alignas(64) std::uint16_t out[4 * 3 * 200]{};
  alignas(64) float cos[8 * 64]{}, sin[8 * 64]{};
};

RopeArgs mla_args(Buffers& b, std::int64_t nope, std::int64_t emb) {
  RopeArgs a;
  a.nope_dim = nope;
  a.emb_dim = emb;
  a.rotation.cos = contiguous_view<const void>(b.cos, DType::f32, {8, emb});
  a.rotation.sin = contiguous_view<const void>(b.sin, DType::f32, {8, emb});
  return a;
}

TEST(LaunchBuilder, MegatronShapesTakeTheFastPaths) {
  static Buffers b;
  const LaunchProfile profile;
  TensorView t = contiguous_view<void>(b.t, DType::bf16, {4, 1, 3, 192});
  TensorView out = contiguous_view<void>(b.out, DType::bf16, {4, 1, 3, 192});
  RopeLaunch l = make_rope_launch(t, out, mla_args(b, 128, 64), {false, false}, profile);
  EXPECT_EQ(l.variant, RopeVariant::chunked_vector);
  EXPECT_TRUE(l.args.copy_vector);
  l = make_rope_launch(t, t, mla_args(b, 128, 64), {true, false}, profile);
  EXPECT_EQ(l.variant, RopeVariant::staged_vector);
  l = make_rope_launch(t, t, mla_args(b, 128, 64), {true, true}, profile);
  EXPECT_EQ(l.variant, RopeVariant::staged_vector);
  EXPECT_EQ(l.args.rotation.read_layout, PairLayout::half);  // the adjoint reads out_layout
  // Rows of 3 slices of 8 chunks: a round takes 8 whole rows (512 / emb 64), so the 4 rows
  // are one round of one block.
  EXPECT_EQ(l.grid.blocks, 1);
  EXPECT_EQ(l.work, 8 * 3 * 8);
  EXPECT_LE(l.grid.threads, profile.max_threads);
}

// A row of more chunks than a staged round holds (40 slices of 64 chunks: 2,560 against
// kStagedChunks' 2,048) goes in rounds of whole slices, 32 and then 8: a round's work is what
// the round holds, not the row's, and each row takes two rounds.
TEST(LaunchBuilder, StagedRoundsOfPartOfARowHoldTheirOwnWork) {
  constexpr std::int64_t kHeads = 40, kNope = 64, kEmb = 512, kChunks = kEmb / 2 / 4;
  std::vector<std::uint16_t> t(2 * kHeads * (kNope + kEmb));
  std::vector<float> cos(8 * kEmb), sin(8 * kEmb);
  RopeArgs a;
  a.nope_dim = kNope;
  a.emb_dim = kEmb;
  a.rotation.cos = contiguous_view<const void>(cos.data(), DType::f32, {8, kEmb});
  a.rotation.sin = contiguous_view<const void>(sin.data(), DType::f32, {8, kEmb});
  TensorView v = contiguous_view<void>(t.data(), DType::bf16, {2, 1, kHeads, kNope + kEmb});
  const LaunchProfile profile;
  const RopeLaunch l = make_rope_launch(v, v, a, {true, false}, profile);
  ASSERT_EQ(l.variant, RopeVariant::staged_vector);
  EXPECT_EQ(l.work, 32 * kChunks);
  EXPECT_EQ(l.grid.blocks, 2 * 2);
}

TEST(LaunchBuilder, UnalignedViewsTakeTheGeneralPath) {
  static Buffers b;
  const LaunchProfile profile;
  TensorView t = contiguous_view<void>(b.t, DType::bf16, {4, 1, 3, 196});  // head stride 392 B
  TensorView out = contiguous_view<void>(b.out, DType::bf16, {4, 1, 3, 196});
  RopeLaunch l = make_rope_launch(t, out, mla_args(b, 132, 64), {false, false}, profile);
  EXPECT_EQ(l.variant, RopeVariant::chunked_scalar);
  EXPECT_FALSE(l.args.copy_vector);
  TensorView shifted = contiguous_view<void>(b.t + 1, DType::bf16, {4, 1, 3, 192});
  l = make_rope_launch(shifted, out, mla_args(b, 128, 64), {false, false}, profile);
  EXPECT_EQ(l.variant, RopeVariant::chunked_scalar);
  l = make_rope_launch(t, t, mla_args(b, 132, 64), {true, false}, profile);
  EXPECT_EQ(l.variant, RopeVariant::whole_slice_scalar);
}

}  // namespace
}  // namespace mlarope::detail
