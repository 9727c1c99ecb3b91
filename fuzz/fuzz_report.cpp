// SPDX-License-Identifier: Apache-2.0
// FuzzStats: merging, fuzz.json and the summary.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "fuzz/fuzz.h"
#include "fuzz/steering.h"
#include "mlarope/error.h"
#include "mlarope/timing.h"

namespace mlarope::harness {
namespace {

// The kernel paths of one op the GPU model saw launched: each of its variants in each
// activation dtype its launches used (mlarope::model_kernel_paths), with their launches, 0
// where a path was never taken.
struct OpPaths {
  std::string op;
  std::vector<std::pair<std::string, std::int64_t>> launches;  // by path name
  // The least-run path's launches over the busiest's (0 when a path was never taken).
  double least_share() const {
    std::int64_t least = launches.empty() ? 0 : launches.front().second, most = 0;
    for (const auto& [path, n] : launches) least = std::min(least, n), most = std::max(most, n);
    return most > 0 ? static_cast<double>(least) / static_cast<double>(most) : 0.0;
  }
};

std::vector<OpPaths> path_coverage(const FuzzStats& s) {
  const auto op_of = [](const std::string& path) { return path.substr(0, path.find('/')); };
  const auto dtype_of = [](const std::string& path) { return path.substr(path.rfind('/') + 1); };
  std::set<std::string> seen;  // "op/dtype" of every launch
  for (const auto& [kernel, t] : s.model)
    if (kernel.find('/') != std::string::npos && t.launches > 0)
      seen.insert(op_of(kernel) + "/" + dtype_of(kernel));
  std::map<std::string, OpPaths> by_op;
  for (const std::string& path : model_kernel_paths()) {
    if (path.find('/') == std::string::npos || seen.count(op_of(path) + "/" + dtype_of(path)) == 0)
      continue;
    OpPaths& op = by_op[op_of(path)];
    op.op = op_of(path);
    const auto found = s.model.find(path);
    op.launches.emplace_back(path, found == s.model.end() ? 0 : found->second.launches);
  }
  std::vector<OpPaths> ops;
  ops.reserve(by_op.size());
  for (auto& [name, op] : by_op) ops.push_back(std::move(op));
  return ops;
}

// What a run saw of the backend's support: a combination is supported when every case of it ran.
// Partly: some of its cases ran and some were declined (say, by their CP or offsets).
struct SupportTally {
  std::int64_t combinations = 0, supported_combinations = 0, partly_supported = 0,
               declined_cases = 0;
};

SupportTally support_tally(const FuzzStats& s) {
  SupportTally t;
  for (const auto& [combination, n] : s.combinations) {
    ++t.combinations;
    if (n[1] == 0) ++t.supported_combinations;
    else if (n[0] > 0) ++t.partly_supported;
    t.declined_cases += n[1];
  }
  return t;
}

}  // namespace

void FuzzStats::merge(const FuzzStats& other) {
  if (steering.empty()) steering = other.steering;  // one warm-up for the whole run
  cases += other.cases;
  failing_cases += other.failing_cases;
  for (const auto& [dimension, values] : other.counts)
    for (const auto& [value, n] : values) counts[dimension][value] += n;
  for (const auto& [check, n] : other.checks)
    for (int i = 0; i < 3; ++i) checks[check][i] += n[i];
  for (const auto& [dtype, h] : other.ulps) ulps[dtype].merge(h);
  for (const auto& [key, h] : other.fractions) fractions[key].merge(h);
  for (const auto& [kernel, t] : other.model) model[kernel].merge(t);
  for (const auto& [combination, n] : other.combinations)
    for (int i = 0; i < 2; ++i) combinations[combination][i] += n[i];
  for (const auto& [reason, n] : other.unsupported) unsupported[reason] += n;
  const bool in_order = failures.empty() || other.failures.empty() ||
                        failures.back().index <= other.failures.front().index;
  failures.insert(failures.end(), other.failures.begin(), other.failures.end());
  if (!in_order)  // a worker's own cases come in order: sorted only where workers' lists meet
    std::sort(failures.begin(), failures.end(),
              [](const FuzzFailure& a, const FuzzFailure& b) { return a.index < b.index; });
}

void ModelTally::add(const ModelLaunchStats& s) {
  ++launches;
  useful_bytes += s.useful_bytes;
  warp_sector_bytes += s.warp_sector_bytes;
  dram_bytes += s.dram_bytes;
  if (cuda_kernel_of(s.kernel).empty()) return;
  static const DeviceProfile h200 = device_profile("h200");
  const TimePrediction p =
      predict_time(s, resource_of(s.kernel, built_kernel_resources()), h200, s.dram_bytes);
  round_trips += p.round_trips_per_block;
  predicted_seconds += p.seconds;
}

nlohmann::json to_json(const FuzzStats& s, const FuzzOptions& o) {
  nlohmann::json j;
  j["backend"] = o.backend;
  j["seed"] = o.seed;
  j["size"] = o.size;
  j["jobs"] = o.jobs;
  nlohmann::json ops = nlohmann::json::array();
  if (!o.yarn_only)
    for (Op op : o.ops) ops.push_back(to_string(op));
  if (o.yarn || o.yarn_only) ops.push_back("yarn_tables");
  j["ops"] = ops;
  auto names = [](const std::vector<DType>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (DType d : v) a.push_back(to_string(d));
    return a;
  };
  if (!o.dtypes.empty()) j["dtypes"] = names(o.dtypes);
  if (!o.table_dtypes.empty()) j["table_dtypes"] = names(o.table_dtypes);
  if (!o.in_place) j["in_place"] = false;
  if (!o.layouts.empty()) j["layouts"] = o.layouts;
  if (!o.position_ids) j["position_ids"] = false;
  if (!o.seq_offsets) j["seq_offsets"] = false;
  if (!o.packed) j["packed"] = false;
  if (o.power_of_two_dims) j["power_of_two_dims"] = true;
  if (!o.tokens.empty()) {
    nlohmann::json tokens = nlohmann::json::array();
    for (TokenLayout t : o.tokens) tokens.push_back(to_string(t));
    j["tokens"] = tokens;
  }
  if (!o.cp_sizes.empty()) j["cp_sizes"] = o.cp_sizes;
  j["shard"] = {{"index", o.shard.index}, {"count", o.shard.count}, {"source", o.shard.source}};
  j["seconds"] = s.seconds;
  j["cases"] = s.cases;
  j["cases_per_second"] = s.rate();
  j["failing_cases"] = s.failing_cases;
  if (!o.variants.empty()) j["variants"] = o.variants;
  if (!o.environment.is_null()) j["environment"] = o.environment;
  j["counts"] = s.counts;
  nlohmann::json checks;
  for (const auto& [check, n] : s.checks)
    checks[check] = {{"pass", n[0]}, {"fail", n[1]}, {"skip", n[2]}};
  j["checks"] = checks;
  nlohmann::json ulps;
  for (const auto& [dtype, h] : s.ulps) {
    nlohmann::json buckets;
    for (int i = 0; i < UlpHistogram::kBuckets; ++i)
      buckets[std::string(UlpHistogram::label(i))] = h.counts[i];
    ulps[dtype] = {{"max_ulps", h.max_ulps}, {"buckets", buckets}};
  }
  j["ulp_histograms"] = ulps;
  nlohmann::json fractions;
  for (const auto& [key, h] : s.fractions) {
    nlohmann::json buckets;
    for (int i = 0; i < FractionHistogram::kBuckets; ++i)
      buckets[std::string(FractionHistogram::label(i))] = h.counts[i];
    fractions[key] = {{"max", std::isfinite(h.max) ? nlohmann::json(h.max) : nlohmann::json("inf")},
                      {"buckets", buckets}};
  }
  j["tolerance_fractions"] = fractions;
  nlohmann::json model;
  for (const auto& [kernel, t] : s.model)
    model[kernel] = {{"launches", t.launches},
                     {"sector_efficiency", t.sector_efficiency()},
                     {"useful_bytes", t.useful_bytes},
                     {"warp_sector_bytes", t.warp_sector_bytes},
                     {"dram_bytes", t.dram_bytes},
                     {"round_trips", t.round_trips},
                     {"predicted_h200_seconds", t.predicted_seconds}};
  if (!s.model.empty()) j["gpu_model"] = model;
  nlohmann::json paths;
  for (const OpPaths& op : path_coverage(s)) {
    nlohmann::json launches;
    for (const auto& [path, n] : op.launches) launches[path] = n;
    paths[op.op] = {{"launches", launches}, {"least_share", op.least_share()}};
  }
  if (!paths.empty()) j["kernel_paths"] = paths;
  const SupportTally support = support_tally(s);
  j["support"] = {{"combinations", support.combinations},
                  {"supported_combinations", support.supported_combinations},
                  {"partly_supported_combinations", support.partly_supported},
                  {"declined_cases", support.declined_cases},
                  {"not_supported", s.unsupported},
                  {"by_combination", s.combinations}};  // [ran, declined]: shards merge exactly
  nlohmann::json failures = nlohmann::json::array();
  for (const FuzzFailure& f : s.failures) {
    nlohmann::json fc = nlohmann::json::array();
    for (const auto& [check, message] : f.checks)
      fc.push_back({{"check", check}, {"message", message}});
    nlohmann::json failure = {{"index", f.index},
                              {"seed", f.seed},
                              {"case", f.description},
                              {"dir", f.dir},
                              {"checks", fc}};
    if (!f.variant.empty()) failure["variant"] = f.variant;
    failures.push_back(std::move(failure));
  }
  j["failures"] = failures;
  if (!s.interrupted.empty()) {  // where the same command resumes
    j["interrupted"] = s.interrupted;
    j["resume"] = {{"next", s.next}, {"pending", s.pending}};
  }
  if (s.resumed > 0) j["resumed"] = s.resumed;
  if (!s.steering.empty()) j["steering"] = nlohmann::json::parse(s.steering);
  return j;
}

FuzzStats stats_from_json(const nlohmann::json& j) {
  FuzzStats s;
  try {
    s.cases = j.value("cases", std::int64_t{0});
    s.failing_cases = j.value("failing_cases", std::int64_t{0});
    s.seconds = j.value("seconds", 0.0);
    if (j.contains("counts")) j.at("counts").get_to(s.counts);
    if (j.contains("checks"))
      for (const auto& [check, n] : j.at("checks").items())
        s.checks[check] = {n.value("pass", std::int64_t{0}), n.value("fail", std::int64_t{0}),
                           n.value("skip", std::int64_t{0})};
    if (j.contains("ulp_histograms"))
      for (const auto& [dtype, h] : j.at("ulp_histograms").items()) {
        UlpHistogram& u = s.ulps[dtype];
        u.max_ulps = h.value("max_ulps", 0.0);
        for (int i = 0; i < UlpHistogram::kBuckets; ++i)
          u.counts[i] = h.at("buckets").value(std::string(UlpHistogram::label(i)), std::int64_t{0});
      }
    if (j.contains("tolerance_fractions"))
      for (const auto& [key, h] : j.at("tolerance_fractions").items()) {
        FractionHistogram& f = s.fractions[key];
        f.max = h.at("max").is_number() ? h.at("max").get<double>() : INFINITY;
        for (int i = 0; i < FractionHistogram::kBuckets; ++i)
          f.counts[i] =
              h.at("buckets").value(std::string(FractionHistogram::label(i)), std::int64_t{0});
      }
    if (j.contains("gpu_model"))
      for (const auto& [kernel, t] : j.at("gpu_model").items())
        s.model[kernel] = {t.value("launches", std::int64_t{0}),
                           t.value("useful_bytes", std::int64_t{0}),
                           t.value("warp_sector_bytes", std::int64_t{0}),
                           t.value("dram_bytes", std::int64_t{0}),
                           t.value("round_trips", 0.0),
                           t.value("predicted_h200_seconds", 0.0)};
    if (j.contains("support")) {
      const nlohmann::json& support = j.at("support");
      if (support.contains("by_combination")) support.at("by_combination").get_to(s.combinations);
      if (support.contains("not_supported")) support.at("not_supported").get_to(s.unsupported);
    }
    s.interrupted = j.value("interrupted", std::string());
    if (j.contains("resume")) {
      s.next = j.at("resume").value("next", std::int64_t{0});
      j.at("resume").at("pending").get_to(s.pending);
    }
    s.resumed = j.value("resumed", 0);
    if (j.contains("steering")) s.steering = j.at("steering").dump();
    if (j.contains("failures"))
      for (const nlohmann::json& f : j.at("failures")) {
        FuzzFailure failure{f.value("index", std::int64_t{0}),
                            f.value("seed", std::uint64_t{0}),
                            f.value("case", std::string()),
                            f.value("dir", std::string()),
                            {},
                            f.value("variant", std::string())};
        for (const nlohmann::json& c : f.value("checks", nlohmann::json::array()))
          failure.checks.emplace_back(c.value("check", std::string()),
                                      c.value("message", std::string()));
        s.failures.push_back(std::move(failure));
      }
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("not a fuzz.json this version reads: ") + e.what());
  }
  return s;
}

// Per op, the least-run kernel path against the busiest: a campaign that leaves a path with
// few launches has barely checked it, whatever its case count.
void print_path_coverage(std::ostream& out, const std::vector<OpPaths>& ops) {
  if (ops.empty()) return;
  out << "  kernel paths, the least-run of each op against its busiest (launches):";
  for (const OpPaths& op : ops) {
    const auto by_launches = [](const auto& a, const auto& b) { return a.second < b.second; };
    const auto& [least, least_n] =
        *std::min_element(op.launches.begin(), op.launches.end(), by_launches);
    const auto& [most, most_n] =
        *std::max_element(op.launches.begin(), op.launches.end(), by_launches);
    char item[256];
    std::snprintf(item, sizeof item, "%s: %zu paths, %s %lld = %.2f of %s %lld%s", op.op.c_str(),
                  op.launches.size(), least.c_str(), static_cast<long long>(least_n),
                  op.least_share(), most.c_str(), static_cast<long long>(most_n),
                  op.least_share() < 0.1 ? " (under a tenth)" : "");
    out << "\n    " << item;
  }
  out << "\n";
}

std::string summary(const FuzzStats& s, const FuzzOptions& o) {
  std::ostringstream out;
  char rate[96];
  std::snprintf(rate, sizeof rate, "%.1f s (%.0f cases/s, %.0f cases/min)", s.seconds, s.rate(),
                60 * s.rate());
  out << "mlarope fuzz: " << s.cases << " cases in " << rate << " on backend " << o.backend
      << ", seed " << o.seed << ", size " << o.size;
  if (o.shard.count > 1)
    out << ", shard " << o.shard.index << " of " << o.shard.count << " (" << o.shard.source << ")";
  out << "\n";
  out << "  checks:";
  for (const auto& [check, n] : s.checks)
    out << " " << check << " " << n[0] << "/" << n[1] << "/" << n[2];
  out << "  (pass/fail/skip)\n";
  if (const auto runs = s.counts.find("variant"); runs != s.counts.end()) {
    // A case runs once per variant: which variants fail is the finding.
    const auto failing = s.counts.find("variant_failing");
    out << "  variants (cases, failing):";
    for (const auto& [variant, n] : runs->second) {
      const std::int64_t bad = failing == s.counts.end() || !failing->second.count(variant)
                                   ? 0
                                   : failing->second.at(variant);
      out << " " << variant << " " << n << "/" << bad;
    }
    out << "\n";
  }
  if (!o.environment.is_null()) out << "  environment: " << o.environment.dump() << "\n";
  if (const auto ops = s.counts.find("op"); ops != s.counts.end()) {
    out << "  cases per op:";
    for (const auto& [op, n] : ops->second) out << " " << op << " " << n;
    // Those the backend took (not declined): what the budget actually checked.
    const auto reached = s.counts.find("reached");
    out << "\n  reached the backend per op:";
    for (const auto& [op, n] : ops->second) {
      const std::int64_t took =
          reached == s.counts.end() || !reached->second.count(op) ? 0 : reached->second.at(op);
      out << " " << op << " " << took << "/" << n;
    }
    out << "\n";
  }
  {  // every class, reached or not: a 0 is a gap in the generators
    const auto edges = s.counts.find("edge_values");
    out << "  edge values reached (cases whose reference outputs have one):";
    for (int e = 0; e < kEdgeValueCount; ++e) {
      const std::string name(to_string(static_cast<EdgeValue>(e)));
      const std::int64_t n =
          edges == s.counts.end() || !edges->second.count(name) ? 0 : edges->second.at(name);
      out << " " << name << " " << n;
    }
    out << "\n";
  }
  if (!s.fractions.empty()) {
    out << "  error / tolerance, the worst element of each case (1 = at the limit; over 1 fails):";
    int shown = 0;
    for (const auto& [key, h] : s.fractions) {
      char item[96];
      std::snprintf(item, sizeof item, "%s max %.3g", key.c_str(), h.max);
      out << (shown++ % 4 == 0 ? "\n    " : ", ") << item;
    }
    out << "\n";
  }
  if (!s.ulps.empty()) {
    out << "  ulps, only where the tolerance is relative (the f32 term below the output's ulp; "
           "near a\n"
           "  cancelling 0 it is absolute and ulps mean nothing):";
    int shown = 0;
    for (const auto& [dtype, h] : s.ulps) {
      char item[64];
      std::snprintf(item, sizeof item, "%s %s max %.3g", shown++ ? "," : "", dtype.c_str(),
                    h.max_ulps);
      out << item;
    }
    out << "\n";
  }
  if (!s.model.empty()) {
    out << "  GPU model, sector efficiency per kernel (launches; H200 us a launch, timing model):";
    int shown = 0;
    for (const auto& [kernel, t] : s.model) {
      char item[160];
      std::snprintf(item, sizeof item, "%s %.2f (%lld; %.1f us)", kernel.c_str(),
                    t.sector_efficiency(), static_cast<long long>(t.launches),
                    t.launches > 0 ? 1e6 * t.predicted_seconds / t.launches : 0.0);
      out << (shown++ % 3 == 0 ? "\n    " : ", ") << item;
    }
    out << "\n";
  }
  print_path_coverage(out, path_coverage(s));
  if (!s.steering.empty())
    out << "  steering: "
        << describe(steering_from_json(nlohmann::json::parse(s.steering), props::GenOptions{}))
        << "\n";
  const SupportTally support = support_tally(s);
  out << "  supported: " << support.supported_combinations << " of " << support.combinations
      << " flag combinations seen";
  if (support.partly_supported > 0) out << ", " << support.partly_supported << " more in part";
  out << " (" << s.cases - support.declined_cases << " of " << s.cases << " cases ran)";
  if (!s.unsupported.empty()) {
    out << "; not supported (declined cases, counted apart from failures):";
    for (const auto& [reason, n] : s.unsupported) out << "\n    " << reason << " (" << n << ")";
  }
  out << "\n";
  out << "  failing cases: " << s.failing_cases << "\n";
  for (std::size_t i = 0; i < s.failures.size() && i < 5; ++i) {
    const FuzzFailure& f = s.failures[i];
    out << "    #" << f.index << " " << f.description << "\n";
    for (const auto& [check, message] : f.checks)
      out << "      " << check << ": " << message << "\n";
    if (!f.dir.empty()) out << "      -> " << (o.out / f.dir).string() << "\n";
  }
  if (!s.interrupted.empty())
    out << "  interrupted by " << s.interrupted
        << ": the same command resumes the run (fuzz.json: \"resume\")\n";
  if (s.resumed > 0) out << "  resumed " << s.resumed << " time(s) after an interruption\n";
  out << "  wrote " << (o.out / "fuzz.json").string() << "\n";
  return out.str();
}

}  // namespace mlarope::harness

namespace mlarope::harness {

JunitSuite junit_suite(const FuzzStats& s, const FuzzOptions& o) {
  constexpr std::size_t kListed = 20;  // failing cases written out per check
  JunitSuite suite;
  suite.name = "mlarope fuzz on " + o.backend;
  suite.seconds = s.seconds;
  suite.properties = {{"backend", o.backend},
                      {"seed", std::to_string(o.seed)},
                      {"size", std::to_string(o.size)},
                      {"cases", std::to_string(s.cases)},
                      {"failing_cases", std::to_string(s.failing_cases)}};
  if (o.shard.count > 1)
    suite.properties.push_back(
        {"shard", std::to_string(o.shard.index) + " of " + std::to_string(o.shard.count)});
  std::map<std::string, std::array<std::int64_t, 3>> checks = s.checks;
  for (const FuzzFailure& f : s.failures)  // a check named only by a failure still gets its case
    for (const auto& [check, message] : f.checks)
      checks.emplace(check, std::array<std::int64_t, 3>{0, 0, 0});
  for (const auto& [check, n] : checks) {
    JunitCase c;
    c.classname = "mlarope.fuzz." + o.backend;
    c.name = check;
    std::ostringstream text;
    std::size_t listed = 0, failed = 0;
    for (const FuzzFailure& f : s.failures)
      for (const auto& [name, message] : f.checks) {
        if (name != check) continue;
        if (++failed > kListed) continue;
        ++listed;
        text << "case #" << f.index << " (seed " << f.seed << "): " << f.description << "\n  "
             << message << "\n";
        if (!f.dir.empty())
          text << "  replay: mlarope check " << (o.out / f.dir).string() << " --backend "
               << o.backend << "\n";
      }
    const std::int64_t failing = std::max<std::int64_t>(n[1], static_cast<std::int64_t>(failed));
    if (failing > 0) {
      c.outcome = JunitCase::Outcome::failure;
      c.message = check + " failed in " + std::to_string(failing) + " of " +
                  std::to_string(n[0] + n[1] + n[2]) + " cases" +
                  (listed < failed ? " (the first " + std::to_string(listed) + " listed)" : "");
      c.text = text.str();
    } else if (n[0] == 0 && n[2] > 0) {
      c.outcome = JunitCase::Outcome::skipped;
      c.message =
          check + " did not apply to any of the " + std::to_string(n[2]) + " cases it was offered";
    }
    suite.cases.push_back(c);
  }
  return suite;
}

}  // namespace mlarope::harness
