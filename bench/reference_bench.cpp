// SPDX-License-Identifier: Apache-2.0
// Google Benchmark of the CPU reference at the shape: SBHD S=4096, B=1, H=32,
// nope=128, emb=64, out-of-place rope in Megatron's MLA mode, bf16 and f32.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "host_convert.h"
#include "reference.h"

using namespace mlarope;

namespace {

constexpr std::int64_t kSeq = 4096, kBatch = 1, kHeads = 32, kNope = 128, kEmb = 64;
constexpr std::int64_t kHeadDim = kNope + kEmb;
constexpr std::int64_t kElements = kSeq * kBatch * kHeads * kHeadDim;

// Inputs and outputs of one benchmark, filled once.
struct RopeFixture {
  DType dtype;
  std::vector<std::byte> t, out;
  std::vector<float> cos, sin;

  explicit RopeFixture(DType d)
      : dtype(d), t(kElements * dtype_size(d)), out(kElements * dtype_size(d)), cos(kSeq * kEmb),
        sin(kSeq * kEmb) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    for (std::int64_t i = 0; i < kElements; ++i) store_rounded(t.data(), dtype, i, dist(rng));
    for (std::int64_t p = 0; p < kSeq; ++p)
      for (std::int64_t k = 0; k < kEmb; ++k) {
        const double angle = p * std::pow(10000.0, -2.0 * (k % (kEmb / 2)) / kEmb);
        cos[p * kEmb + k] = static_cast<float>(std::cos(angle));
        sin[p * kEmb + k] = static_cast<float>(std::sin(angle));
      }
  }

  RopeCall call() {
    RopeCall c;
    c.t = contiguous_view<const void>(t.data(), dtype, {kSeq, kBatch, kHeads, kHeadDim});
    c.out = contiguous_view<void>(out.data(), dtype, {kSeq, kBatch, kHeads, kHeadDim});
    c.args.nope_dim = kNope;
    c.args.emb_dim = kEmb;
    c.args.rotation.cos = contiguous_view<const void>(cos.data(), DType::f32, {kSeq, kEmb});
    c.args.rotation.sin = contiguous_view<const void>(sin.data(), DType::f32, {kSeq, kEmb});
    return c;
  }
};

void set_counters(benchmark::State& state, DType dtype) {
  state.SetItemsProcessed(state.iterations() * kElements);
  // Minimum traffic: read t and the table rows once, write out once.
  const std::int64_t bytes =
      2 * kElements * static_cast<std::int64_t>(dtype_size(dtype)) + 2 * kSeq * kEmb * 4;
  state.SetBytesProcessed(state.iterations() * bytes);
}

void BM_ReferenceRope(benchmark::State& state, DType dtype) {
  RopeFixture f(dtype);
  const RopeCall call = f.call();
  for (auto _ : state) {
    reference::rope(call);
    benchmark::DoNotOptimize(f.out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, dtype);
}

// A plain copy of the same tensor, for scale.
void BM_Copy(benchmark::State& state, DType dtype) {
  RopeFixture f(dtype);
  for (auto _ : state) {
    std::memcpy(f.out.data(), f.t.data(), f.t.size());
    benchmark::DoNotOptimize(f.out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, dtype);
}

}  // namespace

BENCHMARK_CAPTURE(BM_ReferenceRope, sbhd_bf16, DType::bf16)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_ReferenceRope, sbhd_f32, DType::f32)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Copy, sbhd_bf16, DType::bf16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Copy, sbhd_f32, DType::f32)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
