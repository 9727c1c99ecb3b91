// SPDX-License-Identifier: Apache-2.0
// Context lines both benchmark drivers print (Google Benchmark's header of a run).
#pragma once

#include <benchmark/benchmark.h>

namespace mlarope::bench {

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
