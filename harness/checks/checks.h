// SPDX-License-Identifier: Apache-2.0
// The checks of docs/architecture.md's table "What the harness checks for every case", each
// returning a structured result (which check, outcome, which element, expected, got, ulps, a
// message).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "backends/case_run.h"
#include "io/case_file.h"

namespace mlarope::harness {

/// The checks, in the order of the table of docs/architecture.md (The checks).
enum class CheckKind : std::uint8_t {
  value,               ///< outputs (and the status word) vs the reference, tolerance model
  coverage,            ///< every output element the op defines is written
  immutability,        ///< inputs (and the nope part in place) bitwise unchanged
  bounds,              ///< guard bytes and gaps around and between elements unchanged
  round_trip,          ///< forward, then inverse with swapped layouts, gives (c^2 + s^2) x
  adjoint,             ///< <rope(x), y> == <x, rope_backward(y)> in double
  in_place,            ///< in place == out of place, bitwise
  graph_replay,        ///< a captured call replayed on new metadata and inputs
  determinism,         ///< two runs bitwise equal
  order_independence,  ///< two thread/block orders bitwise equal
  races,               ///< no two programs or tile elements touch one byte unordered (recorded)
};
/// Number of CheckKind values.
inline constexpr int kCheckCount = 11;

/// Every check, in table order.
std::vector<CheckKind> all_checks();
/// Spelling of a check ("value", "round_trip", ...).
std::string_view to_string(CheckKind kind);
/// Parse a check name; throws mlarope::Error listing the names otherwise.
CheckKind parse_check(std::string_view name);

/// What a check concluded.
enum class Outcome : std::uint8_t { pass, fail, skip };
/// "pass", "fail" or "skip".
std::string_view to_string(Outcome outcome);

/// The result of one check on one case.
struct CheckResult {
  CheckKind check = CheckKind::value;
  Outcome outcome = Outcome::pass;
  std::string tensor;               ///< output (or input) the worst finding is in; "" if none
  std::vector<std::int64_t> index;  ///< its index tuple ([s, b, h, d] or [t, h, d])
  std::int64_t token = -1;          ///< its row: s * B + b (SBHD) or t (THD); -1 if none
  std::int64_t head = -1;           ///< its head; -1 if none
  std::int64_t dim = -1;            ///< its last-dim index; -1 if none
  double expected = std::numeric_limits<double>::quiet_NaN();
  double got = std::numeric_limits<double>::quiet_NaN();
  double ulps = std::numeric_limits<double>::quiet_NaN();  ///< |got - expected| in ulps
  double max_ulps =
      0.0;  ///< value-like checks: the largest error in ulps where the ulp is the measure
  /// Value-like checks: the worst |error| / allowed over the elements (1 = at the limit of the
  /// tolerance model; infinite when a copied element differs).
  double max_fraction = 0.0;
  std::int64_t failures = 0;  ///< elements (or findings) that failed
  std::string message;        ///< one line: what was found, or why it was skipped

  /// True unless the check failed (a skipped check passes).
  bool ok() const { return outcome != Outcome::fail; }
};

/// Counts of value errors in ulps: bucket edges 0, 1/2, 1, 2, 4, 8, 16, then above 16 and
/// non-finite.
struct UlpHistogram {
  static constexpr int kBuckets = 9;
  std::array<std::int64_t, kBuckets> counts{};
  double max_ulps = 0.0;

  /// Count one error of `ulps` (NaN or inf goes to the last bucket).
  void add(double ulps);
  /// Add another histogram's counts.
  void merge(const UlpHistogram& other);
  /// Label of bucket i ("0", "(0,0.5]", ..., ">16", "non-finite").
  static std::string_view label(int i);
};

/// Counts of errors as a fraction of what the tolerance allows (the worst element of each
/// case): bucket edges 0, 1/8, 1/4, 1/2, 1, then above 1 (a failure) and non-finite.
struct FractionHistogram {
  static constexpr int kBuckets = 7;
  std::array<std::int64_t, kBuckets> counts{};
  double max = 0.0;

  void add(double fraction);
  void merge(const FractionHistogram& other);
  /// Label of bucket i ("0", "(0,0.125]", ..., ">1", "non-finite").
  static std::string_view label(int i);
};

/// Edge values of the semantics' rounding and copies that a case's outputs reach (counted over the
/// reference's outputs by the value check).
enum class EdgeValue : std::uint8_t {
  tie,          ///< an exact f32 result halfway between two values of the output dtype
  near_max,     ///< finite, at least half the output dtype's largest finite value
  overflow,     ///< infinite (rounded past the largest finite value)
  subnormal,    ///< non-zero, below the output dtype's smallest normal
  signed_zero,  ///< -0
  nan_payload,  ///< a NaN that an op copies (its payload must survive bit for bit)
};
inline constexpr int kEdgeValueCount = 6;
/// "tie", "near_max", "overflow", "subnormal", "signed_zero", "nan_payload".
std::string_view to_string(EdgeValue edge);

/// All checks of one case.
struct CheckReport {
  std::vector<CheckResult> results;  ///< one per check that was asked for, in table order
  UlpHistogram histogram;            ///< value errors of the primary run's outputs (ulp regime)
  double tolerance_fraction = -1.0;  ///< the value check's max_fraction; -1 when it did not run
  /// Elements of the reference's outputs of each EdgeValue (the value check's count).
  std::array<std::int64_t, kEdgeValueCount> edges{};
  DeviceStatus status = kStatusOk;  ///< the primary run's status word (docs/semantics.md §5)
  /// Why the backend declined the case ("" when it ran it): no check was run, none failed.
  std::string unsupported;

  /// True when no check failed.
  bool ok() const;
  /// The result of `kind`; throws std::out_of_range when it was not run.
  const CheckResult& at(CheckKind kind) const;
  /// The failed results.
  std::vector<const CheckResult*> failures() const;
};

/// How the check runner lays tensors out: gaps between heads and rows, guard regions.
struct LayoutPlan {
  std::int64_t head_gap = 0;   ///< elements between heads (head stride = head size + gap)
  std::int64_t row_gap = 0;    ///< elements after each (s, b) row and each token row
  std::int64_t table_gap = 0;  ///< elements after each table row
  std::int64_t guard = 16;     ///< guard elements before and after every buffer (at least 64 bytes)
  bool misalign = false;       ///< data starts one element past a 64-byte boundary
  bool broadcast_heads = false;  ///< out-of-place inputs whose heads are all equal: head stride 0
};

/// A LayoutPlan as JSON, and back (missing keys keep their defaults; throws mlarope::Error).
nlohmann::json to_json(const LayoutPlan& plan);
LayoutPlan layout_plan_from_json(const nlohmann::json& json);

/// What run_checks does.
struct CheckOptions {
  LayoutPlan layout;
  std::vector<CheckKind> checks = all_checks();  ///< which checks to run
  std::uint64_t seed = 1;  ///< random data of adjoint and graph replay, order seeds
};

/// CheckOptions as JSON (the checks.json of a failure directory), and back.
nlohmann::json to_json(const CheckOptions& options);
CheckOptions check_options_from_json(const nlohmann::json& json);

/// Run the checks of `options` on `c` with `backend`. Throws mlarope::Error when the reference
/// rejects the case (an invalid case); a backend that throws fails the checks it was run for.
CheckReport run_checks(const Case& c, const Backend& backend, const CheckOptions& options = {});

/// One line per result: "value        pass  max 0.5 ulp over 96 elements".
std::string format_report(const CheckReport& report);
/// One line for one result.
std::string format_result(const CheckResult& result);

}  // namespace mlarope::harness
