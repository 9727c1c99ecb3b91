// SPDX-License-Identifier: Apache-2.0
// Turning benchmark and fuzz results (JSON) into a self-contained HTML page and a Markdown
// summary, with the gate's verdicts (compare.h) and the history (history.h) when given.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernel_resources.h"

namespace mlarope::reports {

/// One benchmark result: op/backend/model/layout/T/dtype and its figures.
struct BenchResult {
  std::string op, backend, shape;  ///< shape = "dsv3/sbhd/T1024/bf16"
  double time_ms = 0;
  double gbps = 0;
  double floor_fraction = 0;  ///< achieved bandwidth over the copy bandwidth of the same run
  double bytes = 0;
  /// The host backend's GPU model at this shape (NaN when absent): sector efficiency, and
  /// predicted DRAM bytes over the op's minimum bytes.
  double model_sector_efficiency = __builtin_nan("");
  double model_dram_fraction = __builtin_nan("");
  /// The timing model's prediction of the call on an H200 (NaN when absent): its fraction of
  /// the copy floor, time, resident blocks per SM, waves, KiB in flight per SM, and the shares
  /// of the copy bandwidth its first wave draws and its DRAM page density leaves it.
  double model_floor_fraction = __builtin_nan("");
  double model_time_us = __builtin_nan("");
  double model_blocks_per_sm = __builtin_nan("");
  double model_waves = __builtin_nan("");
  double model_kib_in_flight = __builtin_nan("");
  double model_bandwidth_drawn = __builtin_nan("");
  double model_bandwidth_available = __builtin_nan("");
  /// "op/backend/shape": the key baselines use.
  std::string key() const { return op + "/" + backend + "/" + shape; }
};

/// Results of Google Benchmark JSON output (`--benchmark_out_format=json`) of mlarope_bench:
/// one per repetition (aggregates and benchmarks that ended in an error are left out).
/// Copies ("op/copy/...") are kept with backend "copy". Throws mlarope::Error on bad input.
std::vector<BenchResult> parse_benchmarks(const nlohmann::json& json, const std::string& where);

/// A fuzz run's fuzz.json, kept as JSON; the page shows whatever of it is present.
struct FuzzReport {
  std::string where;
  nlohmann::json json;
};

struct GateResult;  // compare.h
struct History;     // history.h

/// The Markdown summary (`gate` and `history` may be null).
std::string markdown_summary(const std::vector<BenchResult>& bench,
                             const std::vector<FuzzReport>& fuzz, const GateResult* gate,
                             const std::vector<KernelResource>& kernels = {},
                             const History* history = nullptr);
/// The self-contained HTML page (inline SVG, no network).
std::string html_page(const std::vector<BenchResult>& bench, const std::vector<FuzzReport>& fuzz,
                      const GateResult* gate, const std::vector<KernelResource>& kernels = {},
                      const History* history = nullptr);

}  // namespace mlarope::reports
