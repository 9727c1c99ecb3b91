// SPDX-License-Identifier: Apache-2.0
// What both benchmark drivers (mlarope_bench, cuda_bench) share: the counters `mlarope report`
// reads, the rotation of input sets out of cache, and the context lines of a run.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>

namespace mlarope::bench {

/// Counters of the performance model (docs/architecture.md): the minimum bytes of a call, the
/// achieved GB/s, the copy bandwidth of this run and the fraction of the floor. `seconds` is
/// the time of all of the state's iterations; `copy_bytes_per_second` the run's copy.
inline void set_floor_counters(benchmark::State& state, std::int64_t bytes, double seconds,
                               double copy_bytes_per_second) {
  state.SetBytesProcessed(state.iterations() * bytes);
  const double achieved =
      seconds > 0 ? static_cast<double>(bytes) * state.iterations() / seconds : 0;
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["GBps"] = achieved * 1e-9;
  state.counters["copy_GBps"] = copy_bytes_per_second * 1e-9;
  state.counters["floor_fraction"] = achieved / copy_bytes_per_second;
}

/// Input sets of `bytes` each to rotate among so that together they hold at least `total`
/// bytes: a pass over them does not sit in cache.
inline int rotation_sets(std::int64_t bytes, std::int64_t total) {
  return static_cast<int>(std::max<std::int64_t>(1, (total + bytes - 1) / bytes));
}

/// A context line that says why Google Benchmark warns of a DEBUG build: Debian's package of
/// the library is built without NDEBUG. Its debug checks run between batches of iterations;
/// the timed loops are inlined into our code, built Release.
inline void explain_library_build() {
  benchmark::AddCustomContext(
      "benchmark_library",
      "Debian's libbenchmark is built without NDEBUG, hence a DEBUG warning; its checks run "
      "between batches, the timed loops are our Release code");
}

}  // namespace mlarope::bench
