// SPDX-License-Identifier: Apache-2.0
// Names, results, reports and their JSON/text forms. The checks themselves are in
// check_runner.cpp, algebra_checks.cpp and replay_check.cpp.
#include "checks/checks.h"

#include <cmath>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include "checks/value_compare.h"
#include "mlarope/error.h"

namespace mlarope::harness {

std::vector<CheckKind> all_checks() {
  std::vector<CheckKind> kinds;
  kinds.reserve(kCheckCount);
  for (int i = 0; i < kCheckCount; ++i) kinds.push_back(static_cast<CheckKind>(i));
  return kinds;
}

std::string_view to_string(CheckKind kind) {
  switch (kind) {
    case CheckKind::value: return "value";
    case CheckKind::coverage: return "coverage";
    case CheckKind::immutability: return "immutability";
    case CheckKind::bounds: return "bounds";
    case CheckKind::round_trip: return "round_trip";
    case CheckKind::adjoint: return "adjoint";
    case CheckKind::in_place: return "in_place";
    case CheckKind::graph_replay: return "graph_replay";
    case CheckKind::determinism: return "determinism";
    case CheckKind::order_independence: return "order_independence";
    case CheckKind::races: return "races";
  }
  return "?";
}

CheckKind parse_check(std::string_view name) {
  std::string known;
  for (CheckKind k : all_checks()) {
    if (to_string(k) == name) return k;
    known += (known.empty() ? "" : ", ") + std::string(to_string(k));
  }
  throw Error("check '" + std::string(name) + "': unknown (known: " + known + ")");
}

std::string_view to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::pass: return "pass";
    case Outcome::fail: return "fail";
    case Outcome::skip: return "skip";
  }
  return "?";
}

// --- Histogram and report ----------------------------------------------------------------------

namespace {

// The bucket of `x` in a histogram with upper edges `edges` (x <= edge), then one bucket above
// the last edge and one for a non-finite x.
template <std::size_t N>
int bucket_of(double x, const double (&edges)[N]) {
  if (!std::isfinite(x)) return N + 1;
  for (std::size_t i = 0; i < N; ++i)
    if (x <= edges[i]) return static_cast<int>(i);
  return N;
}

}  // namespace

void UlpHistogram::add(double ulps) {
  static constexpr double kEdges[] = {0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0};
  static_assert(std::size(kEdges) + 2 == kBuckets);
  ++counts[bucket_of(ulps, kEdges)];
  if (std::isfinite(ulps)) max_ulps = std::max(max_ulps, ulps);
}

void UlpHistogram::merge(const UlpHistogram& other) {
  for (int i = 0; i < kBuckets; ++i) counts[i] += other.counts[i];
  max_ulps = std::max(max_ulps, other.max_ulps);
}

void FractionHistogram::add(double fraction) {
  static constexpr double kEdges[] = {0.0, 0.125, 0.25, 0.5, 1.0};
  static_assert(std::size(kEdges) + 2 == kBuckets);
  ++counts[bucket_of(fraction, kEdges)];
  max = std::max(max, std::isnan(fraction) ? INFINITY : fraction);
}

void FractionHistogram::merge(const FractionHistogram& other) {
  for (int i = 0; i < kBuckets; ++i) counts[i] += other.counts[i];
  max = std::max(max, other.max);
}

std::string_view FractionHistogram::label(int i) {
  static constexpr std::string_view kLabels[kBuckets] = {"0",          "(0,0.125]", "(0.125,0.25]",
                                                         "(0.25,0.5]", "(0.5,1]",   ">1",
                                                         "non-finite"};
  return kLabels[i];
}

std::string_view UlpHistogram::label(int i) {
  static constexpr std::string_view kLabels[kBuckets] = {"0",      "(0,0.5]", "(0.5,1]",
                                                         "(1,2]",  "(2,4]",   "(4,8]",
                                                         "(8,16]", ">16",     "non-finite"};
  return kLabels[i];
}

bool CheckReport::ok() const {
  for (const CheckResult& r : results)
    if (!r.ok()) return false;
  return true;
}

const CheckResult& CheckReport::at(CheckKind kind) const {
  for (const CheckResult& r : results)
    if (r.check == kind) return r;
  throw std::out_of_range("check " + std::string(to_string(kind)) + " was not run");
}

std::vector<const CheckResult*> CheckReport::failures() const {
  std::vector<const CheckResult*> out;
  for (const CheckResult& r : results)
    if (!r.ok()) out.push_back(&r);
  return out;
}

std::string format_result(const CheckResult& r) {
  std::string name(to_string(r.check));
  name.resize(std::max<std::size_t>(name.size(), 19), ' ');
  return name + std::string(to_string(r.outcome)) + "  " + r.message;
}

std::string format_report(const CheckReport& report) {
  std::string s;
  for (const CheckResult& r : report.results) s += format_result(r) + "\n";
  return s;
}

// --- JSON --------------------------------------------------------------------------------------

namespace {
template <class T>
void read_key(const nlohmann::json& j, const char* key, T& out) {
  if (!j.contains(key)) return;
  try {
    out = j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(std::string("checks.json: '") + key + "' has the wrong type: " + j.at(key).dump());
  }
}
}  // namespace

nlohmann::json to_json(const LayoutPlan& p) {
  return {{"head_gap", p.head_gap},   {"row_gap", p.row_gap},
          {"table_gap", p.table_gap}, {"guard", p.guard},
          {"misalign", p.misalign},   {"broadcast_heads", p.broadcast_heads}};
}

LayoutPlan layout_plan_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("checks.json: 'layout' must be an object");
  LayoutPlan p;
  read_key(j, "head_gap", p.head_gap);
  read_key(j, "row_gap", p.row_gap);
  read_key(j, "table_gap", p.table_gap);
  read_key(j, "guard", p.guard);
  read_key(j, "misalign", p.misalign);
  read_key(j, "broadcast_heads", p.broadcast_heads);
  if (p.head_gap < 0 || p.row_gap < 0 || p.table_gap < 0 || p.guard < 0 || p.head_gap > 4096 ||
      p.row_gap > 4096 || p.table_gap > 4096 || p.guard > 4096)
    throw Error("checks.json: layout gaps and guard must lie in [0, 4096]");
  return p;
}

nlohmann::json to_json(const CheckOptions& o) {
  nlohmann::json checks = nlohmann::json::array();
  for (CheckKind k : o.checks) checks.push_back(to_string(k));
  return {{"layout", to_json(o.layout)}, {"checks", checks}, {"seed", o.seed}};
}

CheckOptions check_options_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("checks.json: expected a JSON object");
  CheckOptions o;
  if (j.contains("layout")) o.layout = layout_plan_from_json(j.at("layout"));
  read_key(j, "seed", o.seed);
  if (j.contains("checks")) {
    std::vector<std::string> names;
    read_key(j, "checks", names);
    o.checks.clear();
    for (const std::string& n : names) o.checks.push_back(parse_check(n));
  }
  return o;
}

std::string_view to_string(EdgeValue edge) {
  switch (edge) {
    case EdgeValue::tie: return "tie";
    case EdgeValue::near_max: return "near_max";
    case EdgeValue::overflow: return "overflow";
    case EdgeValue::subnormal: return "subnormal";
    case EdgeValue::signed_zero: return "signed_zero";
    case EdgeValue::nan_payload: return "nan_payload";
  }
  return "?";
}

}  // namespace mlarope::harness
