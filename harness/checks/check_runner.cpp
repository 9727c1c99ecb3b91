// SPDX-License-Identifier: Apache-2.0
// run_checks: the reference answer, the runs, and the checks made of comparing runs (value,
// determinism, in place == out of place, order independence, races) or of auditing them (coverage,
// immutability, bounds).
#include <algorithm>
#include <chrono>
#include <cstring>

#include "checks/check_context.h"
#include "host_convert.h"
#include "mlarope/error.h"
#include "mlarope/op_schema.h"

namespace mlarope::harness {
namespace detail {

std::string rope_output(Op op) { return std::string(schema_of(op).outputs[0]); }
std::string rope_input(Op op) { return std::string(schema_of(op).activation()); }
bool is_rope_family(Op op) { return op == Op::rope || op == Op::rope_backward; }

CheckResult failed(CheckKind kind, const std::string& message) {
  CheckResult r;
  r.check = kind;
  r.outcome = Outcome::fail;
  r.failures = 1;
  r.message = message;
  return r;
}

CheckResult skipped(CheckKind kind, const std::string& reason) {
  CheckResult r;
  r.check = kind;
  r.outcome = Outcome::skip;
  r.message = reason;
  return r;
}

npy::Array random_like(const npy::Array& like, DType dtype, std::uint64_t seed) {
  npy::Array a = npy::make(like.dtype, like.shape);
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  auto next = [&] {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (std::int64_t i = 0; i < a.size(); ++i) {
    // Twice a sum of four uniforms on [-1/2, 1/2): roughly normal, mean 0, variance 4/3.
    double x = 0;
    for (int k = 0; k < 4; ++k) x += static_cast<double>(next() >> 11) * 0x1.0p-53 - 0.5;
    store_rounded(a.bytes.data(), dtype, i, 2.0 * x);
  }
  return a;
}

CheckContext::CheckContext(const Case& c, const Backend& backend, const CheckOptions& options)
    : case_(c), backend_(backend), options_(options) {
  try {
    const auto start = std::chrono::steady_clock::now();
    expected_ = run_case(case_, reference_backend());
    if (backend_.expect_time)
      backend_.expect_time(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  } catch (const std::exception& e) {
    throw Error(std::string("invalid case (the reference rejects it): ") + e.what());
  }
  if (wants(CheckKind::value) || wants(CheckKind::graph_replay)) values_ = value_context(case_);
}

bool CheckContext::wants(CheckKind kind) const {
  return std::find(options_.checks.begin(), options_.checks.end(), kind) != options_.checks.end();
}

const RunResult& CheckContext::primary() {
  if (!have_primary_) {
    primary_ = run(case_, case_.config.in_place, Fill::poison_a, "the primary run");
    have_primary_ = true;
  }
  return primary_;
}

RunResult CheckContext::run(const Case& c, bool in_place, Fill poison, const std::string& label,
                            const Backend* backend) {
  RunResult r = run_strided(c, backend ? *backend : backend_, options_.layout, in_place, poison);
  if (!r.unsupported.empty()) return r;  // declined: it wrote nothing, there is nothing to audit
  if (!in_place) saw_out_of_place_ = true;
  record(r.findings, label);
  return r;
}

void CheckContext::record(const std::vector<RunFinding>& findings, const std::string& label) {
  for (const RunFinding& f : findings) findings_.emplace_back(label, f);
}

CheckResult CheckContext::audit_result(CheckKind kind) const {
  CheckResult r;
  r.check = kind;
  const RunFinding* first = nullptr;
  std::string label;
  for (const auto& [run_label, f] : findings_) {
    if (f.check != kind) continue;
    if (r.failures++ == 0) first = &f, label = run_label;
  }
  if (!first) {
    r.message = "clean";
    return r;
  }
  r.outcome = Outcome::fail;
  r.tensor = first->tensor;
  r.index = first->index;
  r.token = first->token;
  r.head = first->head;
  r.dim = first->dim;
  std::string where;
  if (!r.index.empty()) {
    where = " at [";
    for (std::size_t d = 0; d < r.index.size(); ++d)
      where += (d ? ", " : "") + std::to_string(r.index[d]);
    where += "]";
  }
  r.message =
      label + " " + first->message + where + "; " + std::to_string(r.failures) + " finding(s)";
  return r;
}

namespace {

CheckResult check_value(CheckContext& ctx, UlpHistogram& histogram) {
  const RunResult& p = ctx.primary();
  if (!p.error.empty()) {
    CheckResult r = failed(CheckKind::value, "the backend threw: " + p.error);
    r.max_fraction = INFINITY;  // no value to measure: counted as non-finite
    return r;
  }
  return compare_outputs(ctx.kase(), ctx.values(), p.outputs, ctx.expected(), CheckKind::value, 1.0,
                         &histogram);
}

CheckResult check_determinism(CheckContext& ctx) {
  const RunResult& p = ctx.primary();
  const RunResult second =
      ctx.run(ctx.kase(), ctx.kase().config.in_place, Fill::poison_b, "the second run");
  if (!p.error.empty() || !second.error.empty())
    return failed(CheckKind::determinism, "the backend threw: " + p.error + second.error);
  return compare_bitwise(ctx.kase(), p.outputs, second.outputs, CheckKind::determinism,
                         "a second run (other poison)");
}

CheckResult check_in_place(CheckContext& ctx) {
  const Case& c = ctx.kase();
  if (!detail::is_rope_family(c.config.op))
    return skipped(CheckKind::in_place,
                   std::string(to_string(c.config.op)) + " has no in-place form");
  const bool other_mode = !c.config.in_place;
  const RunResult& p = ctx.primary();
  const RunResult other = ctx.run(c, other_mode, Fill::poison_b,
                                  other_mode ? "the in-place run" : "the out-of-place run");
  if (!other.unsupported.empty())
    return skipped(CheckKind::in_place, "not applicable: the backend declines the other form (" +
                                            other.unsupported + ")");
  if (!p.error.empty() || !other.error.empty())
    return failed(CheckKind::in_place, "the backend threw: " + p.error + other.error);
  return compare_bitwise(c, p.outputs, other.outputs, CheckKind::in_place,
                         other_mode ? "in place vs out of place" : "out of place vs in place");
}

CheckResult check_order(CheckContext& ctx) {
  if (!ctx.backend().with_order_seed)
    return skipped(CheckKind::order_independence,
                   "backend " + ctx.backend().name + " has no with_order_seed");
  const RunResult& p = ctx.primary();
  for (std::uint64_t k = 1; k <= 2; ++k) {
    const std::uint64_t seed = ctx.options().seed * 2 + k;
    Backend ordered;
    try {
      ordered = ctx.backend().with_order_seed(seed);
    } catch (const std::exception& e) {
      return failed(CheckKind::order_independence,
                    std::string("with_order_seed threw: ") + e.what());
    }
    const std::string label = "order seed " + std::to_string(seed);
    const RunResult r = ctx.run(ctx.kase(), ctx.kase().config.in_place, Fill::poison_b,
                                "the run with " + label, &ordered);
    if (!p.error.empty() || !r.error.empty())
      return failed(CheckKind::order_independence, "the backend threw: " + p.error + r.error);
    CheckResult cmp =
        compare_bitwise(ctx.kase(), p.outputs, r.outputs, CheckKind::order_independence,
                        label + " vs the default order");
    if (!cmp.ok() || k == 2) return cmp;
  }
  return skipped(CheckKind::order_independence, "unreachable");
}

CheckResult check_races(CheckContext& ctx) {
  const Backend& b = ctx.backend();
  if (!b.with_race_check)
    return skipped(CheckKind::races, "backend " + b.name +
                                         " records no accesses (with_race_check); a GPU model "
                                         "that checks every launch fails the call instead");
  Backend recording;
  try {
    recording = b.with_race_check();
  } catch (const std::exception& e) {
    return failed(CheckKind::races, std::string("with_race_check threw: ") + e.what());
  }
  const RunResult& p = ctx.primary();
  const RunResult r = ctx.run(ctx.kase(), ctx.kase().config.in_place, Fill::poison_b,
                              "the run with races recorded", &recording);
  if (!r.error.empty()) return failed(CheckKind::races, r.error);
  if (!p.error.empty()) return failed(CheckKind::races, "the backend threw: " + p.error);
  // Recording must not change what the kernel computes.
  return compare_bitwise(ctx.kase(), p.outputs, r.outputs, CheckKind::races,
                         "the run with races recorded vs the plain run");
}

CheckResult check_coverage(CheckContext& ctx) {
  if (!ctx.saw_out_of_place())
    return skipped(CheckKind::coverage, "in place only: the rope slices hold the input until "
                                        "written (the value check covers them)");
  return ctx.audit_result(CheckKind::coverage);
}

}  // namespace
}  // namespace detail

CheckReport run_checks(const Case& c, const Backend& backend, const CheckOptions& options) {
  using namespace detail;
  CheckContext ctx(c, backend, options);
  CheckReport report;
  if (!ctx.primary().unsupported.empty()) {  // declined: nothing to check, nothing failed
    report.unsupported = ctx.primary().unsupported;
    return report;
  }
  std::vector<CheckResult> results(kCheckCount);
  auto want = [&](CheckKind k) { return ctx.wants(k); };
  if (want(CheckKind::value)) {
    results[int(CheckKind::value)] = check_value(ctx, report.histogram);
    report.edges = count_edges(ctx.kase(), ctx.values(), ctx.expected());
    report.tolerance_fraction = results[int(CheckKind::value)].max_fraction;
  }
  if (want(CheckKind::determinism)) results[int(CheckKind::determinism)] = check_determinism(ctx);
  if (want(CheckKind::in_place)) results[int(CheckKind::in_place)] = check_in_place(ctx);
  if (want(CheckKind::round_trip)) results[int(CheckKind::round_trip)] = check_round_trip(ctx);
  if (want(CheckKind::adjoint)) results[int(CheckKind::adjoint)] = check_adjoint(ctx);
  if (want(CheckKind::graph_replay))
    results[int(CheckKind::graph_replay)] = check_graph_replay(ctx);
  if (want(CheckKind::order_independence))
    results[int(CheckKind::order_independence)] = check_order(ctx);
  if (want(CheckKind::races)) results[int(CheckKind::races)] = check_races(ctx);
  const bool audits =
      want(CheckKind::coverage) || want(CheckKind::immutability) || want(CheckKind::bounds);
  if (audits) ctx.primary();
  if (want(CheckKind::coverage)) results[int(CheckKind::coverage)] = check_coverage(ctx);
  if (want(CheckKind::immutability))
    results[int(CheckKind::immutability)] = ctx.audit_result(CheckKind::immutability);
  if (want(CheckKind::bounds))
    results[int(CheckKind::bounds)] = ctx.audit_result(CheckKind::bounds);
  for (CheckKind k : all_checks())
    if (want(k)) report.results.push_back(results[int(k)]);
  report.status = ctx.primary().outputs.status;
  return report;
}

}  // namespace mlarope::harness
