// Turning benchmark and fuzz results (JSON) into a self-contained HTML page, a Markdown
// summary, and a regression gate against a baseline of floor fractions.
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
  /// "op/backend/shape": the key baselines use.
  std::string key() const { return op + "/" + backend + "/" + shape; }
};

/// Results of Google Benchmark JSON output (`--benchmark_out_format=json`) of mlarope_bench.
/// Copies ("op/copy/...") are kept with backend "copy". Throws mlarope::Error on bad input.
std::vector<BenchResult> parse_benchmarks(const nlohmann::json& json, const std::string& where);

/// A fuzz run's fuzz.json, kept as JSON; the page shows whatever of it is present.
struct FuzzReport {
  std::string where;
  nlohmann::json json;
};

/// What the regression gate found.
struct GateResult {
  double threshold = 0;  ///< allowed relative drop of the floor fraction, e.g. 0.25
  int compared = 0;
  std::vector<std::string> regressions;  ///< one line each: key, baseline, now, drop
  std::vector<std::string> missing;      ///< baseline keys with no result in this run
  bool ok() const { return regressions.empty(); }
};

/// Compare floor fractions with a baseline ({"threshold": x, "floor_fraction": {key: f}});
/// of repeated results of one benchmark the best counts.
GateResult check_baseline(const std::vector<BenchResult>& results, const nlohmann::json& baseline);
/// A baseline of the results of one backend (all backends when empty), best of repetitions.
nlohmann::json make_baseline(const std::vector<BenchResult>& results, const std::string& backend,
                             double threshold);

/// The Markdown summary.
std::string markdown_summary(const std::vector<BenchResult>& bench,
                             const std::vector<FuzzReport>& fuzz, const GateResult* gate,
                             const std::vector<KernelResource>& kernels = {});
/// The self-contained HTML page (inline SVG, no network).
std::string html_page(const std::vector<BenchResult>& bench, const std::vector<FuzzReport>& fuzz,
                      const GateResult* gate, const std::vector<KernelResource>& kernels = {});

}  // namespace mlarope::reports
