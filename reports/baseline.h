// SPDX-License-Identifier: Apache-2.0
// A stored baseline: a Google Benchmark JSON of mlarope_bench (or cuda_bench) with every
// repetition, and the machine it was recorded on. It gates only that machine: a floor
// fraction is a ratio of two bandwidths of one machine, and another machine (faster memory,
// slower cores) moves every compute-heavy fraction, so a baseline of another machine is
// reported as not applied, never as a failure.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compare.h"
#include "report.h"

namespace mlarope::reports {

/// What identifies the machine of a benchmark run (its JSON's "context").
struct Machine {
  std::string host;       ///< host_name
  std::string cpu_model;  ///< cpu_model (mlarope_bench), or the CUDA device's name
  int cpus = 0;           ///< num_cpus
  double copy_gbps = 0;   ///< the copy bandwidth the run measured
  /// "host 'x', cpu 'y', 2 cpus, copy 27.7 GB/s".
  std::string describe() const;
};

/// The machine of a Google Benchmark JSON document (missing fields stay empty or 0).
Machine machine_of(const nlohmann::json& benchmark_json);

/// Copy bandwidths further apart than this (relative) are different machines: the same
/// machine measures its copy within a few percent from run to run.
inline constexpr double kCopyBandwidthTolerance = 0.25;

/// "" when `recorded` and `now` are the same machine, else what differs. With
/// `unknown_differs`, a field either side does not know differs too (a baseline must show it
/// belongs here before it may fail a run); without, only fields both know are compared.
std::string machine_difference(const Machine& recorded, const Machine& now,
                               bool unknown_differs = true);

/// This run (`results`, measured on `now`) against the baseline document `baseline` read from
/// `path`, key by key over the baseline's keys (keys only this run has are not gated). Throws
/// mlarope::Error when the baseline is not a Google Benchmark JSON, carries no repetitions, or
/// shares no key with this run.
GateResult check_baseline(const std::vector<BenchResult>& results, const Machine& now,
                          const nlohmann::json& baseline, const std::string& path,
                          const CompareOptions& options);

}  // namespace mlarope::reports
