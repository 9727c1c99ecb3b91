// SPDX-License-Identifier: Apache-2.0
#include "dashboard.h"

#include <algorithm>

#include "stats.h"
#include "svg.h"

namespace mlarope::reports {
namespace {

// The q-quantile of sorted values, interpolated between neighbours.
double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double at = q * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<std::size_t>(at);
  const std::size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (at - static_cast<double>(below)) * (sorted[above] - sorted[below]);
}

}  // namespace

std::map<std::string, KeySummary> summarize(const std::vector<BenchResult>& results) {
  std::map<std::string, std::vector<const BenchResult*>> by_key;
  for (const BenchResult& r : results) by_key[r.key()].push_back(&r);
  std::map<std::string, KeySummary> out;
  for (const auto& [key, runs] : by_key) {
    std::vector<double> fractions, gbps, times;
    for (const BenchResult* r : runs) {
      fractions.push_back(r->floor_fraction);
      gbps.push_back(r->gbps);
      times.push_back(r->time_ms);
    }
    std::sort(fractions.begin(), fractions.end());
    std::sort(times.begin(), times.end());
    KeySummary s;
    s.repetitions = static_cast<int>(runs.size());
    s.floor_fraction = median(fractions);
    s.floor_min = fractions.front();
    s.floor_q1 = quantile(fractions, 0.25);
    s.floor_q3 = quantile(fractions, 0.75);
    s.floor_max = fractions.back();
    s.gbps = median(gbps);
    s.time_ms = median(times);
    s.time_min_ms = times.front();
    s.time_max_ms = times.back();
    out[key] = s;
  }
  return out;
}

nlohmann::json bencher_bmf(const std::map<std::string, KeySummary>& summaries) {
  nlohmann::json bmf = nlohmann::json::object();
  auto metric = [](double value, double lower, double upper) {
    return nlohmann::json{{"value", value}, {"lower_value", lower}, {"upper_value", upper}};
  };
  for (const auto& [key, s] : summaries) {
    nlohmann::json& b = bmf[key];
    b["floor-fraction"] = metric(s.floor_fraction, s.floor_min, s.floor_max);
    b["latency"] = metric(s.time_ms * 1e6, s.time_min_ms * 1e6, s.time_max_ms * 1e6);
    if (s.time_ms > 0 && s.time_min_ms > 0)  // calls per second: the slowest call is the lower end
      b["throughput"] = metric(1e3 / s.time_ms, 1e3 / s.time_max_ms, 1e3 / s.time_min_ms);
    b["gbps"] = nlohmann::json{{"value", s.gbps}};
  }
  return bmf;
}

nlohmann::json benchmark_action(const std::map<std::string, KeySummary>& summaries) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, s] : summaries)
    out.push_back(
        {{"name", key},
         {"unit", "fraction of the copy floor"},
         {"value", s.floor_fraction},
         {"range", "± " + fixed((s.floor_max - s.floor_min) / 2, 4)},
         {"extra", "median of " + std::to_string(s.repetitions) + " repetitions; " +
                       fixed(s.gbps, 2) + " GB/s; " + fixed(s.time_ms, 4) + " ms a call"}});
  return out;
}

}  // namespace mlarope::reports
