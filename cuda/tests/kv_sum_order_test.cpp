// SPDX-License-Identifier: Apache-2.0
// kv_split_backward's f32 head sums follow the one documented order (kv_sum_groups in
// kernels/kv_split_kernels.h: heads dealt into G groups, each summed in head order, the
// partial sums added in group order), bit for bit, in the host's fast mode and under the GPU
// model (the device code paths: partial sums in shared memory between two phases, or, for few
// heads, a thread's own sum of a pair chunk over every head). The inputs
// are chosen so that a different order (plain head order, groups added in another order)
// gives different bits, and the tables are the identity (cos 1, sin 0), so grad_k_pe is the
// sum itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <vector>

#include "kernels/kv_split_kernels.h"
#include "mlarope/backend.h"
#include "mlarope/ops.h"

namespace mlarope::test {
namespace {

constexpr std::int64_t kRows = 3, kHeads = 128, kK = 128, kEmb = 64;

// Heads of a call, and its k_dim (= v_dim).
struct KvShape {
  std::int64_t heads = kHeads;
  std::int64_t kv_dim = kK;
};

TEST(KvSumOrder, GroupsFollowTheDocumentedRule) {
  EXPECT_EQ(kernels::kv_sum_groups(128, 8), 16);   // DeepSeek-V3 bf16: 8 chunks of 4 pairs
  EXPECT_EQ(kernels::kv_sum_groups(128, 16), 8);   // f32: 16 chunks of 2 pairs
  EXPECT_EQ(kernels::kv_sum_groups(3, 8), 3);      // at most one group per head
  EXPECT_EQ(kernels::kv_sum_groups(128, 200), 1);  // more chunks than slots: one group
  EXPECT_EQ(kernels::kv_sum_groups(0, 8), 1);
}

// Values of every magnitude from 2^-12 to 2^12, either sign: f32 sums of them depend on order.
std::vector<float> grad_key_values(const KvShape& sh = {}) {
  std::vector<float> v(static_cast<std::size_t>(kRows * sh.heads * (sh.kv_dim + kEmb)));
  std::uint64_t state = 12345;
  for (float& x : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int exponent = static_cast<int>((state >> 33) % 25) - 12;
    const float mantissa = 1.0f + static_cast<float>((state >> 40) & 0xffff) / 65536.0f;
    x = std::ldexp((state >> 63) != 0 ? -mantissa : mantissa, exponent);
  }
  return v;
}

// Element k of row `row`'s rope slices summed in f32: heads dealt into `groups` groups, each
// summed in head order from 0, the partial sums added in `group_order`.
float grouped_sum(const std::vector<float>& g, std::int64_t row, std::int64_t k,
                  std::int64_t groups, const std::vector<std::int64_t>& group_order,
                  const KvShape& sh = {}) {
  std::vector<float> partial(static_cast<std::size_t>(groups), 0.0f);
  for (std::int64_t h = 0; h < sh.heads; ++h)
    partial[static_cast<std::size_t>(h % groups)] +=
        g[static_cast<std::size_t>((row * sh.heads + h) * (sh.kv_dim + kEmb) + sh.kv_dim + k)];
  float sum = partial[static_cast<std::size_t>(group_order[0])];
  for (std::size_t i = 1; i < group_order.size(); ++i)
    sum += partial[static_cast<std::size_t>(group_order[i])];
  return sum;
}

std::vector<std::int64_t> ascending(std::int64_t n) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  return order;
}

// n floats whose first is 256-byte aligned (like cudaMalloc's), so that the GPU model's
// sector counts do not depend on where malloc put them.
class AlignedFloats {
 public:
  AlignedFloats(std::size_t n, float value) : storage_(n + 64, value) {
    const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
    data_ = storage_.data() + ((256 - address % 256) % 256) / sizeof(float);
  }
  float* data() { return data_; }

 private:
  std::vector<float> storage_;
  float* data_;
};

// grad_k_pe of kv_split_backward (SBHD [kRows, 1, heads, ...], activations of `dtype`, f32
// identity tables) on `stream`, as floats.
std::vector<float> grad_k_pe_on(Stream& stream, const std::vector<float>& grad_key_values,
                                DType dtype = DType::f32, const KvShape& sh = {}) {
  const std::int64_t heads = sh.heads, kv = sh.kv_dim;
  const bool bf16 = dtype == DType::bf16;
  AlignedFloats grad_key(grad_key_values.size(), 0.0f);
  for (std::size_t i = 0; i < grad_key_values.size(); ++i) {
    if (bf16)
      reinterpret_cast<std::uint16_t*>(grad_key.data())[i] =
          kernels::float_to_bf16(grad_key_values[i]);
    else grad_key.data()[i] = grad_key_values[i];
  }
  AlignedFloats grad_value(static_cast<std::size_t>(kRows * heads * kv), 0.0f);
  AlignedFloats grad_kv(static_cast<std::size_t>(kRows * heads * 2 * kv), 0.0f);
  AlignedFloats grad_k_pe(static_cast<std::size_t>(kRows * kEmb), 0.0f);
  AlignedFloats cos(static_cast<std::size_t>(kRows * kEmb), 1.0f),
      sin(static_cast<std::size_t>(kRows * kEmb), 0.0f);
  KvSplitBackwardCall c;
  c.grad_key = contiguous_view<const void>(grad_key.data(), dtype, {kRows, 1, heads, kv + kEmb});
  c.grad_value = contiguous_view<const void>(grad_value.data(), dtype, {kRows, 1, heads, kv});
  c.grad_kv = contiguous_view<void>(grad_kv.data(), dtype, {kRows, 1, heads, 2 * kv});
  c.grad_k_pe = contiguous_view<void>(grad_k_pe.data(), dtype, {kRows, 1, 1, kEmb});
  c.args.k_dim = kv;
  c.args.v_dim = kv;
  c.args.emb_dim = kEmb;
  c.args.rotation.in_layout = c.args.rotation.out_layout = PairLayout::half;
  c.args.rotation.cos = contiguous_view<const void>(cos.data(), DType::f32, {kRows, kEmb});
  c.args.rotation.sin = contiguous_view<const void>(sin.data(), DType::f32, {kRows, kEmb});
  kv_split_backward(c, stream);
  stream.synchronize();
  std::vector<float> out(static_cast<std::size_t>(kRows * kEmb));
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] =
        bf16 ? kernels::bf16_to_float(reinterpret_cast<const std::uint16_t*>(grad_k_pe.data())[i])
             : grad_k_pe.data()[i];
  return out;
}

bool same_bits(float a, float b) {
  // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise is meant (NaNs, signed zeros)
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Elements of `got` whose bits differ from the sums in `order` with `groups` groups.
int mismatches(const std::vector<float>& got, const std::vector<float>& grad_key,
               std::int64_t groups, const std::vector<std::int64_t>& order,
               const KvShape& sh = {}) {
  int n = 0;
  for (std::int64_t row = 0; row < kRows; ++row)
    for (std::int64_t k = 0; k < kEmb; ++k)
      n += same_bits(got[static_cast<std::size_t>(row * kEmb + k)],
                     grouped_sum(grad_key, row, k, groups, order, sh))
               ? 0
               : 1;
  return n;
}

TEST(KvSumOrder, GradKPeIsTheGroupedSumBitForBitInBothHostModes) {
  const std::vector<float> grad_key = grad_key_values();
  const std::int64_t groups =
      kernels::kv_sum_groups(kHeads, kEmb / 2 / kernels::kVectorPairs<float>);
  ASSERT_EQ(groups, 8);
  std::vector<std::int64_t> reversed = ascending(groups);
  std::reverse(reversed.begin(), reversed.end());
  // The inputs tell the orders apart: head order, and the groups added backwards, differ.
  const int head_order = [&] {
    Stream s = Stream::host({1, 2, false});
    return mismatches(grad_k_pe_on(s, grad_key), grad_key, 1, ascending(1));
  }();
  EXPECT_GT(head_order, 10) << "the inputs should make head order and grouped order differ";
  for (bool gpu_model : {false, true}) {
    SCOPED_TRACE(gpu_model ? "GPU model" : "fast mode");
    Stream s = Stream::host({1, 2, gpu_model});
    const std::vector<float> got = grad_k_pe_on(s, grad_key);
    EXPECT_EQ(mismatches(got, grad_key, groups, ascending(groups)), 0);
    EXPECT_GT(mismatches(got, grad_key, groups, reversed), 10);
  }
}

// Consecutive threads take consecutive chunks of one head, so a warp reads whole slices; in
// bf16 (chunks of 8 bytes per half) dealing the heads to consecutive threads instead would
// use half of each sector (0.90 over the launch).
TEST(KvSumOrder, TheGpuModelSeesCoalescedPartialSums) {
  const std::vector<float> grad_key = grad_key_values();
  for (DType dtype : {DType::f32, DType::bf16}) {
    Stream s = Stream::host({1, 1, true});
    grad_k_pe_on(s, grad_key, dtype);
    const std::vector<ModelLaunchStats> stats = take_model_stats(s);
    ASSERT_EQ(stats.size(), 1u);
    std::cout << "  " << stats[0].kernel << ": sector efficiency " << stats[0].sector_efficiency()
              << ", DRAM " << stats[0].dram_bytes << " bytes\n";
    EXPECT_EQ(stats[0].kernel,
              std::string("kv_split_backward/vector/") + (dtype == DType::f32 ? "f32" : "bf16"));
    EXPECT_GE(stats[0].sector_efficiency(), 0.99);
  }
}

// kv_split_backward in f32 of shape `sh` on a host stream, under the GPU model or in the fast
// mode: grad_k_pe is the grouped sum bit for bit, and not the groups added backwards. Returns
// the model's figures of the launch (none in the fast mode).
std::vector<ModelLaunchStats> expect_the_grouped_order(const KvShape& sh, bool gpu_model) {
  const std::vector<float> grad_key = grad_key_values(sh);
  const std::int64_t groups =
      kernels::kv_sum_groups(sh.heads, kEmb / 2 / kernels::kVectorPairs<float>);
  std::vector<std::int64_t> reversed = ascending(groups);
  std::reverse(reversed.begin(), reversed.end());
  Stream s = Stream::host({1, 2, gpu_model});
  const std::vector<float> got = grad_k_pe_on(s, grad_key, DType::f32, sh);
  EXPECT_EQ(mismatches(got, grad_key, groups, ascending(groups), sh), 0);
  EXPECT_GT(mismatches(got, grad_key, groups, reversed, sh), 10);
  return take_model_stats(s);
}

// Groups of at most kShortSumBatch heads, beyond kChunkSumMaxHeads heads, take their own path,
// a thread's items loaded together (stage_short_group_sums): the same order, bit for bit, in
// the fast mode and under the GPU model. f32: 20 heads (8 groups of 2 and 3), 17 (one group of
// 3), 32 (4 each: one item a batch), and 20 heads with k and v of 512 (128 threads: one item a
// thread).
TEST(KvSumOrder, ShortGroupsKeepTheOrder) {
  for (const KvShape& sh : {KvShape{20, kK}, KvShape{17, kK}, KvShape{32, kK}, KvShape{20, 512}}) {
    SCOPED_TRACE(testing::Message() << sh.heads << " heads, k and v " << sh.kv_dim);
    ASSERT_GT(sh.heads, kernels::kChunkSumMaxHeads);
    ASSERT_LE(sh.heads,
              kernels::kShortSumBatch *
                  kernels::kv_sum_groups(sh.heads, kEmb / 2 / kernels::kVectorPairs<float>));
    for (bool gpu_model : {false, true}) {
      SCOPED_TRACE(gpu_model ? "GPU model" : "fast mode");
      expect_the_grouped_order(sh, gpu_model);
    }
  }
}

// At most kChunkSumMaxHeads heads, a thread sums a pair chunk over every head itself, in the
// same order (ordered_head_sum), while the block's other threads copy: in f32 (8 groups at
// most) 16 heads are 8 groups of 2, 11 are 3 of 2 and 5 of 1, and up to 8 every head is a
// group; k and v of 512 give 128 threads. Each block's row then has one phase with loads
// instead of two (the staged partial sums'), which the model's figures show.
TEST(KvSumOrder, FewHeadsAreSummedAChunkAThreadInTheSameOrder) {
  for (const KvShape& sh : {KvShape{16, kK}, KvShape{11, kK}, KvShape{8, kK}, KvShape{5, kK},
                            KvShape{3, kK}, KvShape{16, 512}}) {
    SCOPED_TRACE(testing::Message() << sh.heads << " heads, k and v " << sh.kv_dim);
    ASSERT_LE(sh.heads, kernels::kChunkSumMaxHeads);
    for (bool gpu_model : {false, true}) {
      SCOPED_TRACE(gpu_model ? "GPU model" : "fast mode");
      const std::vector<ModelLaunchStats> stats = expect_the_grouped_order(sh, gpu_model);
      if (!gpu_model) continue;
      ASSERT_EQ(stats.size(), 1u);
      ASSERT_EQ(stats[0].blocks_run, kRows);  // a block a row: one round each
      EXPECT_EQ(stats[0].load_phases, kRows) << "one phase with loads a row";
      EXPECT_GE(stats[0].sector_efficiency(), 0.99);
    }
  }
}

// In bf16 at 16 heads a block has 32 threads (16 work items a thread: 16 x (16 + 16) copy
// pieces): 8 sum the chunks, two batches of 8 heads then one of coefficients, and 24 copy,
// two batches a part (k, v): 4 round trips, in one phase. Loaded a head at a time the sums
// alone would take 16; staged in shared memory they took a second phase with loads.
TEST(KvSumOrder, SixteenHeadsTakeFourRoundTripsInOnePhase) {
  constexpr std::int64_t kFewHeads = 16;
  Stream s = Stream::host({1, 1, true});
  grad_k_pe_on(s, grad_key_values({kFewHeads, kK}), DType::bf16, {kFewHeads, kK});
  const std::vector<ModelLaunchStats> stats = take_model_stats(s);
  ASSERT_EQ(stats.size(), 1u);
  ASSERT_EQ(stats[0].threads, 32);
  ASSERT_GT(stats[0].blocks_run, 0);
  EXPECT_EQ(stats[0].round_trips, 4 * stats[0].blocks_run) << stats[0].kernel;
  EXPECT_EQ(stats[0].load_phases, stats[0].blocks_run);
  EXPECT_EQ(stats[0].index_round_trips, 0);
}

}  // namespace
}  // namespace mlarope::test
