// SPDX-License-Identifier: Apache-2.0
#include "baseline.h"

#include <cmath>
#include <cstdlib>

#include "mlarope/error.h"
#include "svg.h"

namespace mlarope::reports {

using nlohmann::json;

std::string Machine::describe() const {
  return "host '" + host + "', cpu '" + cpu_model + "', " + std::to_string(cpus) + " cpus, copy " +
         fixed(copy_gbps, 1) + " GB/s";
}

Machine machine_of(const json& j) {
  Machine m;
  const json context = j.is_object() && j.contains("context") && j["context"].is_object()
                           ? j["context"]
                           : json::object();
  auto text = [&](const char* key) {
    return context.contains(key) && context[key].is_string() ? context[key].get<std::string>()
                                                             : std::string();
  };
  m.host = text("host_name");
  m.cpu_model = text("cpu_model");
  if (m.cpu_model.empty()) m.cpu_model = text("cuda_device");
  if (context.contains("num_cpus") && context["num_cpus"].is_number())
    m.cpus = context["num_cpus"].get<int>();
  // Custom context values are strings; older runs have the bandwidth only as a counter.
  if (const std::string copy = text("copy_GBps"); !copy.empty())
    m.copy_gbps = std::atof(copy.c_str());
  if (m.copy_gbps <= 0 && j.contains("benchmarks") && j["benchmarks"].is_array())
    for (const json& b : j["benchmarks"])
      if (b.contains("copy_GBps") && b["copy_GBps"].is_number()) {
        m.copy_gbps = b["copy_GBps"].get<double>();
        break;
      }
  return m;
}

std::string machine_difference(const Machine& recorded, const Machine& now, bool unknown_differs) {
  std::string diff;
  auto differs = [&](const std::string& what, const std::string& a, const std::string& b) {
    const bool unknown = a.empty() || b.empty();
    if (unknown ? unknown_differs : a != b)
      diff += (diff.empty() ? "" : "; ") + what + " '" + a + "' vs '" + b + "'";
  };
  differs("host", recorded.host, now.host);
  differs("cpu", recorded.cpu_model, now.cpu_model);
  const bool cpus_unknown = recorded.cpus == 0 || now.cpus == 0;
  if (cpus_unknown ? unknown_differs : recorded.cpus != now.cpus)
    diff += (diff.empty() ? "" : "; ") + std::to_string(recorded.cpus) + " vs " +
            std::to_string(now.cpus) + " cpus";
  const bool copy_unknown = recorded.copy_gbps <= 0 || now.copy_gbps <= 0;
  const double ratio = copy_unknown ? 0 : now.copy_gbps / recorded.copy_gbps;
  if (copy_unknown ? unknown_differs : !(std::fabs(ratio - 1) <= kCopyBandwidthTolerance))
    diff += (diff.empty() ? "" : "; ") + std::string("copy bandwidth ") +
            fixed(recorded.copy_gbps, 1) + " vs " + fixed(now.copy_gbps, 1) + " GB/s";
  return diff;
}

GateResult check_baseline(const std::vector<BenchResult>& results, const Machine& now,
                          const json& baseline, const std::string& path,
                          const CompareOptions& options) {
  if (baseline.is_object() && baseline.contains("floor_fraction") &&
      !baseline.contains("benchmarks"))
    throw Error(path +
                ": a map of best floor fractions, which no test can compare with a distribution; a "
                "baseline is a Google Benchmark JSON with every repetition: mlarope_bench "
                "--benchmark_repetitions=9 --benchmark_out=" +
                path + " --benchmark_out_format=json");
  const std::vector<BenchResult> recorded = parse_benchmarks(baseline, path);
  if (recorded.empty())
    throw Error(path + ": no repetitions (only aggregates, or no benchmark): record it without "
                       "--benchmark_report_aggregates_only");
  GateResult gate;
  gate.title = "this run against the baseline " + path;
  const Machine then = machine_of(baseline);
  if (const std::string diff = machine_difference(then, now); !diff.empty()) {
    gate.applied = false;
    gate.note =
        "not applied: the baseline was recorded on another machine (" + diff +
        "); record one here to gate "
        "this machine, or compare with a base measured in the same run (ci/bench-compare.sh)";
    return gate;
  }
  const Samples base = floor_fraction_samples(recorded);
  Samples change;
  int extra = 0;
  for (auto& [key, values] : floor_fraction_samples(results)) {
    if (base.count(key)) change[key] = values;
    else ++extra;
  }
  if (change.empty())
    throw Error(path + ": no key in common with this run (the baseline has " +
                std::to_string(base.size()) + " keys, such as " + base.begin()->first + ")");
  gate.comparison = compare(base, change, options);
  if (extra > 0)
    gate.note = std::to_string(extra) + " keys of this run are not in the baseline (not gated)";
  return gate;
}

}  // namespace mlarope::reports
