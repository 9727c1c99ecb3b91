// SPDX-License-Identifier: Apache-2.0
// The host backend against a plain copy of the same bytes, in the same run (bytes processed =
// bytes read + bytes written):
//   rope, out of place, bf16, SBHD S=4096 B=1 H=32 nope=128 emb=64, MLA mode, f32 tables;
//   kv_split, bf16, THD T=4096 H=32 k=128 v=128 emb=64 (one sequence), f32 tables.
// The copy moves the same total: memcpy of (read + written) / 2 bytes.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "mlarope/backend.h"

namespace mlarope {
namespace {

constexpr std::int64_t kRows = 4096, kHeads = 32, kNope = 128, kEmb = 64, kK = 128, kV = 128;

DeviceBuffer filled(std::size_t bytes, unsigned char value) {
  DeviceBuffer b(BackendKind::host, bytes);
  b.fill_bytes(value);
  return b;
}

// bf16 0x3c00 (~0.0078) everywhere: finite values, the arithmetic is the real one.
DeviceBuffer bf16_buffer(std::int64_t elements) { return filled(elements * 2, 0x3c); }

struct Tables {
  DeviceBuffer cos = filled(kRows * kEmb * 4, 0x3e), sin = filled(kRows * kEmb * 4, 0x3d);
  Rotation rotation() {
    Rotation r;  // MLA: interleaved in, half out, half table
    r.cos = contiguous_view<const void>(cos.data(), DType::f32, {kRows, kEmb});
    r.sin = contiguous_view<const void>(sin.data(), DType::f32, {kRows, kEmb});
    return r;
  }
  static std::int64_t bytes() { return 2 * kRows * kEmb * 4; }
};

void report(benchmark::State& state, std::int64_t bytes_moved) {
  state.SetBytesProcessed(state.iterations() * bytes_moved);
  state.counters["MB_moved"] = static_cast<double>(bytes_moved) / 1e6;
}

void copy_bytes(benchmark::State& state, std::int64_t bytes) {
  std::vector<unsigned char> src(static_cast<std::size_t>(bytes), 1),
      dst(static_cast<std::size_t>(bytes));
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  report(state, 2 * bytes);
}

std::int64_t rope_bytes() {
  const std::int64_t activation = kRows * kHeads * (kNope + kEmb) * 2;
  return 2 * activation + Tables::bytes();
}

std::int64_t kv_split_bytes() {
  const std::int64_t read = kRows * kHeads * (kK + kV) * 2 + kRows * kEmb * 2;
  const std::int64_t written = kRows * kHeads * (kK + kEmb + kV) * 2;
  return read + written + Tables::bytes();
}

void BM_MemcpyRopeBytes(benchmark::State& state) { copy_bytes(state, rope_bytes() / 2); }

void BM_HostRopeBf16Sbhd(benchmark::State& state) {
  Stream stream = Stream::host({1, static_cast<int>(state.range(0))});
  const std::int64_t d = kNope + kEmb;
  DeviceBuffer t = bf16_buffer(kRows * kHeads * d), out = bf16_buffer(kRows * kHeads * d);
  Tables tables;
  RopeCall call;
  call.t = contiguous_view<const void>(t.data(), DType::bf16, {kRows, 1, kHeads, d});
  call.out = contiguous_view<void>(out.data(), DType::bf16, {kRows, 1, kHeads, d});
  call.args.nope_dim = kNope;
  call.args.emb_dim = kEmb;
  call.args.rotation = tables.rotation();
  for (auto _ : state) {
    rope(call, stream);
    stream.synchronize();
    benchmark::ClobberMemory();
  }
  report(state, rope_bytes());
}

void BM_MemcpyKvSplitBytes(benchmark::State& state) { copy_bytes(state, kv_split_bytes() / 2); }

void BM_HostKvSplitBf16Thd(benchmark::State& state) {
  Stream stream = Stream::host({1, static_cast<int>(state.range(0))});
  DeviceBuffer kv = bf16_buffer(kRows * kHeads * (kK + kV)), k_pe = bf16_buffer(kRows * kEmb);
  DeviceBuffer key = bf16_buffer(kRows * kHeads * (kK + kEmb)),
               value = bf16_buffer(kRows * kHeads * kV);
  DeviceBuffer cu(BackendKind::host, 8);
  const std::int32_t cu_host[2] = {0, static_cast<std::int32_t>(kRows)};
  cu.copy_from_host(cu_host, sizeof cu_host);
  Tables tables;
  KvSplitCall call;
  call.kv = contiguous_view<const void>(kv.data(), DType::bf16, {kRows, kHeads, kK + kV});
  call.k_pe = contiguous_view<const void>(k_pe.data(), DType::bf16, {kRows, 1, kEmb});
  call.key = contiguous_view<void>(key.data(), DType::bf16, {kRows, kHeads, kK + kEmb});
  call.value = contiguous_view<void>(value.data(), DType::bf16, {kRows, kHeads, kV});
  call.args.k_dim = kK;
  call.args.v_dim = kV;
  call.args.emb_dim = kEmb;
  call.args.rotation = tables.rotation();
  call.args.positions.layout = TokenLayout::thd;
  call.args.positions.cu_seqlens = {cu.data(), IndexType::i32, 2};
  for (auto _ : state) {
    kv_split(call, stream);
    stream.synchronize();
    benchmark::ClobberMemory();
  }
  report(state, kv_split_bytes());
}

BENCHMARK(BM_MemcpyRopeBytes)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_HostRopeBf16Sbhd)
    ->Arg(1)
    ->Arg(2)
    ->ArgName("threads")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_MemcpyKvSplitBytes)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_HostKvSplitBf16Thd)
    ->Arg(1)
    ->Arg(2)
    ->ArgName("threads")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace mlarope

BENCHMARK_MAIN();
