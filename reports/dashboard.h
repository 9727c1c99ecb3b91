// SPDX-License-Identifier: Apache-2.0
// What dashboards read: each benchmark key's repetitions summed up (median and spread), in
// the formats of Bencher (BMF JSON) and github-action-benchmark (customBiggerIsBetter).
// Their Google Benchmark adapters read only `real_time`; these carry the floor fraction.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report.h"

namespace mlarope::reports {

/// One key's repetitions, summed up.
struct KeySummary {
  int repetitions = 0;
  double floor_fraction = 0;  ///< median
  double floor_min = 0, floor_q1 = 0, floor_q3 = 0, floor_max = 0;
  double gbps = 0;                                       ///< median
  double time_ms = 0, time_min_ms = 0, time_max_ms = 0;  ///< median, fastest, slowest
};

/// key ("op/backend/shape") -> its summary, over every repetition in `results`.
std::map<std::string, KeySummary> summarize(const std::vector<BenchResult>& results);

/// Bencher Metric Format: {key: {measure: {value, lower_value, upper_value}}} with the
/// measures floor-fraction, latency (ns a call), throughput (calls per second) and gbps;
/// value the median, lower and upper the extremes over the repetitions.
nlohmann::json bencher_bmf(const std::map<std::string, KeySummary>& summaries);

/// github-action-benchmark's customBiggerIsBetter: [{name, unit, value, range, extra}] with
/// the median floor fraction, the spread of the repetitions as its range, and GB/s and the
/// time in extra.
nlohmann::json benchmark_action(const std::map<std::string, KeySummary>& summaries);

}  // namespace mlarope::reports
