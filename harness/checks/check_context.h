// SPDX-License-Identifier: Apache-2.0
// Private to the checks: what the checks of one case share (the case, the reference answer,
// the primary run) and the runs they make, whose audit findings feed coverage, immutability
// and bounds.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "checks/checks.h"
#include "checks/strided_call.h"
#include "checks/value_compare.h"

namespace mlarope::harness::detail {

/// The state of run_checks for one case.
class CheckContext {
 public:
  /// Runs the reference on `c` (throws mlarope::Error "invalid case: ..." if it rejects it).
  CheckContext(const Case& c, const Backend& backend, const CheckOptions& options);

  const Case& kase() const { return case_; }
  const Backend& backend() const { return backend_; }
  const CheckOptions& options() const { return options_; }
  const CaseOutputs& expected() const { return expected_; }
  const ValueContext& values() const { return values_; }
  /// True when `kind` was asked for.
  bool wants(CheckKind kind) const;

  /// The run of the case as it is (poison A), made on first use.
  const RunResult& primary();
  /// Run `c` on `backend` (the context's when null) and keep its findings under `label`.
  RunResult run(const Case& c, bool in_place, Fill poison, const std::string& label,
                const Backend* backend = nullptr);
  /// Keep the findings of a run made elsewhere.
  void record(const std::vector<RunFinding>& findings, const std::string& label);
  /// The kept findings of `kind` as one result (pass when there are none).
  CheckResult audit_result(CheckKind kind) const;
  /// True when some run was out of place (so coverage was observed).
  bool saw_out_of_place() const { return saw_out_of_place_; }

 private:
  Case case_;
  Backend backend_;
  CheckOptions options_;
  CaseOutputs expected_;
  ValueContext values_;
  bool have_primary_ = false;
  bool saw_out_of_place_ = false;
  RunResult primary_;
  std::vector<std::pair<std::string, RunFinding>> findings_;
};

/// The name of the output of a rope-family op ("out" or "grad_t"), and of its input.
std::string rope_output(Op op);
std::string rope_input(Op op);
/// True for rope and rope_backward.
bool is_rope_family(Op op);

/// A failed result of `kind` with `message`.
CheckResult failed(CheckKind kind, const std::string& message);
/// A skipped result of `kind` with the reason.
CheckResult skipped(CheckKind kind, const std::string& reason);

/// The round trip check (algebra_checks.cpp).
CheckResult check_round_trip(CheckContext& ctx);
/// The adjoint check (algebra_checks.cpp).
CheckResult check_adjoint(CheckContext& ctx);
/// The graph replay check (replay_check.cpp).
CheckResult check_graph_replay(CheckContext& ctx);

/// The case of `c` with new inputs and metadata of the same shapes (replay_check.cpp).
Case replay_variant(const Case& c, std::uint64_t seed);

/// An array like `like` (same shape and storage dtype) of `dtype` values drawn from `seed`.
npy::Array random_like(const npy::Array& like, DType dtype, std::uint64_t seed);

}  // namespace mlarope::harness::detail
