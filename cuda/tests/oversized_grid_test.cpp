// SPDX-License-Identifier: Apache-2.0
// Grids other than the launch builder's. The builder gives one block per row (or staged
// round) up to a cap, and at most 128 threads, the number of the THD gate's checking slots; the
// kernel bodies are written for any grid, so blocks past the work must do nothing, threads past
// the slots must leave the gate to the others, and fewer blocks take several rounds each. Each
// launch runs under the GPU model (the device paths, bounds and races checked) and must equal, bit
// for bit and status word included, the same call made through the public entry point.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "launch/footprint.h"
#include "launch/launch_builder.h"
#include "launch/stream_impl.h"
#include "mlarope/backend.h"
#include "mlarope/ops.h"

namespace mlarope::test {
namespace {

constexpr std::int64_t kRows = 6, kHeads = 5, kNope = 4;

std::vector<float> ramp(std::int64_t n, float step) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = -1.0f + step * static_cast<float>(i % 97);
  return v;
}

// A contiguous f32 view of `shape`.
template <class Void>
BasicTensorView<Void> f32_view(Void* data, const std::vector<std::int64_t>& shape) {
  BasicTensorView<Void> v;
  v.data = data;
  v.dtype = DType::f32;
  v.rank = static_cast<int>(shape.size());
  std::int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.shape[d] = shape[static_cast<std::size_t>(d)];
    v.strides[d] = stride;
    stride *= v.shape[d];
  }
  return v;
}

// f32 rope operands: [kRows, kHeads, kNope + emb] (THD, two sequences) or [3, 2, ...] (SBHD).
struct RopeData {
  RopeData(bool thd, std::int64_t emb) : emb(emb), thd(thd) {
    t = ramp(kRows * kHeads * (kNope + emb), 0.013f);
    out.assign(t.size(), 0.0f);
    cos = ramp(kRows * emb, 0.01f);
    sin = ramp(kRows * emb, 0.007f);
  }
  std::vector<std::int64_t> shape() const {
    if (thd) return {kRows, kHeads, kNope + emb};
    return {kRows / 2, 2, kHeads, kNope + emb};
  }
  RopeArgs args() {
    RopeArgs a;
    a.nope_dim = kNope;
    a.emb_dim = emb;
    a.rotation.in_layout = PairLayout::interleaved;
    a.rotation.out_layout = PairLayout::half;
    a.rotation.cos = contiguous_view<const void>(cos.data(), DType::f32, {kRows, emb});
    a.rotation.sin = contiguous_view<const void>(sin.data(), DType::f32, {kRows, emb});
    if (thd) {
      a.positions.layout = TokenLayout::thd;
      a.positions.cu_seqlens = {cu, IndexType::i32, 3};
    }
    a.status = &status;
    return a;
  }
  std::int64_t emb;
  bool thd;
  std::vector<float> t, out, cos, sin;
  std::int32_t cu[3] = {0, 2, 6};
  DeviceStatus status = 0;
};

// Run `launch` with `grid` under the GPU model, for the call whose footprint is `footprint`.
template <class Launch>
void run_with_grid(const detail::Footprint& footprint, Launch launch, kernels::GridShape grid) {
  HostStreamOptions options;
  options.gpu_model = true;
  Stream stream = Stream::host(options);
  launch.grid = grid;
  stream.impl().set_footprint(footprint);
  stream.impl().launch(launch);
  stream.synchronize();
}

Stream model_stream() {
  HostStreamOptions options;
  options.gpu_model = true;
  return Stream::host(options);
}

struct Oversize {
  std::int64_t extra_blocks;
  int threads;  ///< 0: the builder's
};

kernels::GridShape oversized(kernels::GridShape g, Oversize o) {
  return {g.blocks + o.extra_blocks, o.threads > 0 ? o.threads : g.threads};
}

TEST(OversizedGrid, RopeWithMoreBlocksThanRowsAndMoreThreadsThanGateSlots) {
  for (bool thd : {false, true})
    for (Oversize o : {Oversize{5, 0}, Oversize{0, 256}, Oversize{3, 192}, Oversize{-4, 0}}) {
      SCOPED_TRACE(std::string(thd ? "THD" : "SBHD") + ", " + std::to_string(o.extra_blocks) +
                   " extra blocks, threads " + std::to_string(o.threads));
      RopeData want(thd, 16), got(thd, 16);
      const auto shape = want.shape();
      Stream s = model_stream();
      rope({f32_view<const void>(want.t.data(), shape), f32_view<void>(want.out.data(), shape),
            want.args()},
           s);
      s.synchronize();
      const RopeCall call{f32_view<const void>(got.t.data(), shape),
                          f32_view<void>(got.out.data(), shape), got.args()};
      const detail::RopeLaunch l =
          detail::make_rope_launch(call.t, call.out, call.args, {false, false},
                                   detail::cuda_launch_profile());
      ASSERT_EQ(l.variant, detail::RopeVariant::chunked_vector);
      run_with_grid(detail::footprint_of(call), l, oversized(l.grid, o));
      EXPECT_EQ(got.out, want.out);
      EXPECT_EQ(got.status, want.status);
    }
}

TEST(OversizedGrid, StagedRopeWithMoreBlocksThanRoundsAndWithFewer) {
  // f32, 128 chunks a slice at emb 512: 8 slices a round, a round a row, 6 rounds a call; 64
  // chunks at emb 256: rounds of 2 whole rows (512 / 256), 3 rounds a call, each block planning
  // its next round's rows while it writes the current one. Blocks of 32 threads (the builder
  // gives 128) take 2 steps of 16 copies a round (at emb 512) and more coefficient slots (128 at
  // emb 512) than threads; a block of one thread does every step of a round alone.
  for (const auto& [emb, rounds] : {std::pair<std::int64_t, std::int64_t>{512, 6}, {256, 3}})
    for (int threads : {0, 32, 1})                 // 0: the builder's
      for (std::int64_t blocks : {19, 5, 2, 1}) {  // 5 (emb 512), 2 and 1: several rounds a block
        SCOPED_TRACE("emb " + std::to_string(emb) + ", " + std::to_string(blocks) + " blocks of " +
                     std::to_string(threads) + " threads");
        RopeData want(false, emb), got(false, emb);
        const auto shape = want.shape();
        Stream s = model_stream();
        rope_inplace({f32_view<void>(want.t.data(), shape), want.args()}, s);
        s.synchronize();
        const RopeInplaceCall call{f32_view<void>(got.t.data(), shape), got.args()};
        const detail::RopeLaunch l =
            detail::make_rope_launch(call.t, call.t, call.args, {true, false},
                                     detail::cuda_launch_profile());
        ASSERT_EQ(l.variant, detail::RopeVariant::staged_vector);
        ASSERT_EQ(l.grid.blocks, rounds);
        run_with_grid(detail::footprint_of(call), l,
                      {blocks, threads > 0 ? threads : l.grid.threads});
        EXPECT_EQ(got.t, want.t);
      }
}

// f32 kv_split operands: kv [3, 2, kHeads, 8 + 8], k_pe [3, 2, 1, 16].
struct KvData {
  KvData() {
    kv = ramp(kRows * kHeads * 16, 0.011f);
    k_pe = ramp(kRows * 16, 0.017f);
    key.assign(static_cast<std::size_t>(kRows * kHeads * 24), 0.0f);
    value.assign(static_cast<std::size_t>(kRows * kHeads * 8), 0.0f);
    cos = ramp(kRows * 16, 0.01f);
    sin = ramp(kRows * 16, 0.007f);
  }
  KvSplitCall call() {
    KvSplitCall c;
    c.kv = contiguous_view<const void>(kv.data(), DType::f32, {3, 2, kHeads, 16});
    c.k_pe = contiguous_view<const void>(k_pe.data(), DType::f32, {3, 2, 1, 16});
    c.key = contiguous_view<void>(key.data(), DType::f32, {3, 2, kHeads, 24});
    c.value = contiguous_view<void>(value.data(), DType::f32, {3, 2, kHeads, 8});
    c.args.k_dim = 8;
    c.args.v_dim = 8;
    c.args.emb_dim = 16;
    c.args.rotation.cos = contiguous_view<const void>(cos.data(), DType::f32, {kRows, 16});
    c.args.rotation.sin = contiguous_view<const void>(sin.data(), DType::f32, {kRows, 16});
    return c;
  }
  KvSplitBackwardCall backward_call() {  // grad_key = key, grad_value = value
    KvSplitBackwardCall c;
    c.grad_key = contiguous_view<const void>(key.data(), DType::f32, {3, 2, kHeads, 24});
    c.grad_value = contiguous_view<const void>(value.data(), DType::f32, {3, 2, kHeads, 8});
    c.grad_kv = contiguous_view<void>(kv.data(), DType::f32, {3, 2, kHeads, 16});
    c.grad_k_pe = contiguous_view<void>(k_pe.data(), DType::f32, {3, 2, 1, 16});
    c.args = call().args;
    return c;
  }
  std::vector<float> kv, k_pe, key, value, cos, sin;
};

TEST(OversizedGrid, KvSplitAndItsBackwardWithMoreBlocksThanRows) {
  KvData want, got;
  Stream s = model_stream();
  kv_split(want.call(), s);
  s.synchronize();
  const KvSplitCall call = got.call();
  const detail::KvSplitLaunch l = detail::make_kv_split_launch(call, detail::cuda_launch_profile());
  run_with_grid(detail::footprint_of(call), l, oversized(l.grid, {4, 0}));
  EXPECT_EQ(got.key, want.key);
  EXPECT_EQ(got.value, want.value);

  kv_split_backward(want.backward_call(), s);
  s.synchronize();
  const KvSplitBackwardCall back = got.backward_call();
  const detail::KvSplitBackwardLaunch b =
      detail::make_kv_split_backward_launch(back, detail::cuda_launch_profile());
  run_with_grid(detail::footprint_of(back), b, oversized(b.grid, {4, 0}));
  EXPECT_EQ(got.kv, want.kv);
  EXPECT_EQ(got.k_pe, want.k_pe);
}

}  // namespace
}  // namespace mlarope::test
