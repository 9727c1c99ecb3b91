// SPDX-License-Identifier: Apache-2.0
// The benchmark gate: two sets of repetitions of the same benchmarks (a base and a change,
// measured interleaved in one run, or a stored baseline and this run) compared key by key.
//
// A key's verdict is SLOWER only when the change's floor fractions lie below the base's with
// an exact one-sided Mann-Whitney p below `alpha` after Holm's correction over every key
// compared, AND the estimated drop is beyond the key's minimum effect (10% on the host, 5% on
// a GPU): a real but tiny shift is not worth a red build, and a large but noisy one is not yet
// shown. FASTER is the mirror image. UNKNOWN means the data cannot decide: too few
// repetitions on a side, a key on one side only, or a sample that is not a positive number.
// The gate passes only when no key is SLOWER or UNKNOWN; UNKNOWN is never a pass.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/junit.h"
#include "report.h"
#include "stats.h"

namespace mlarope::reports {

/// A key's verdict.
enum class Verdict { same, faster, slower, unknown };
/// "SAME", "FASTER", "SLOWER", "UNKNOWN".
const char* to_string(Verdict verdict);

/// What the gate asks of the data.
struct CompareOptions {
  double alpha = 0.002;           ///< the largest Holm-adjusted p that counts
  double host_min_effect = 0.10;  ///< the smallest drop that counts, host keys
  double gpu_min_effect = 0.05;   ///< the smallest drop that counts, keys of a GPU backend
  /// Key or key prefix -> minimum effect, overriding the two above (the longest prefix wins).
  std::map<std::string, double> key_min_effect;
  int min_samples = 9;  ///< repetitions a side below which a key is UNKNOWN
  double level = 0.95;  ///< of the confidence interval of the change
};

/// The minimum effect `options` sets for `key` ("op/backend/shape").
double min_effect_of(const std::string& key, const CompareOptions& options);

/// Repetitions of one measure per key: key -> one value per repetition.
using Samples = std::map<std::string, std::vector<double>>;

/// The floor fraction of every repetition of each key of `results`.
Samples floor_fraction_samples(const std::vector<BenchResult>& results);

/// One key compared.
struct KeyComparison {
  std::string key;
  std::vector<double> base, change;  ///< the samples
  double base_median = 0, change_median = 0;
  RelativeChange change_estimate;     ///< change over base, with its interval
  double p_slower = 1, p_faster = 1;  ///< Holm-adjusted over the keys compared
  double min_effect = 0;
  bool tested = false;  ///< in Holm's family: samples enough on both sides
  Verdict verdict = Verdict::unknown;
  std::string reason;      ///< why UNKNOWN; for a repeated measurement, what the first one said
  bool confirmed = false;  ///< SLOWER twice: in the first measurement and in its repetition
};

/// Every key of a comparison.
struct Comparison {
  CompareOptions options;
  std::vector<KeyComparison> keys;
  int tested = 0;  ///< keys in Holm's family (those with samples enough on both sides)

  /// SLOWER if a key is, else UNKNOWN if a key is, else SAME (FASTER keys pass).
  Verdict overall() const;
  /// The keys whose verdict is SLOWER.
  std::vector<std::string> slower_keys() const;
};

/// Compare `change` with `base`, key by key.
Comparison compare(const Samples& base, const Samples& change, const CompareOptions& options);

/// The gate's second look: `repeat` measured again the keys `first` found SLOWER. Such a key
/// stays SLOWER (confirmed) only when `repeat` finds it SLOWER too; otherwise it takes the
/// repeat's verdict, with the first one in its reason. Other keys keep the first verdict.
Comparison confirm(const Comparison& first, const Comparison& repeat);

/// A gate: this run against a stored baseline, or a change against its base.
struct GateResult {
  std::string title;    ///< what was compared with what
  bool applied = true;  ///< false: the baseline belongs to another machine, so nothing is gated
  std::string note;     ///< why it was not applied, or what it left out
  Comparison comparison;
  /// 0: passed, or not applied; 1: a key is SLOWER; 3: a key is UNKNOWN (the gate cannot decide).
  int exit_status() const;
};

/// A table of every key (Markdown): medians, change and interval, p values, verdict.
std::string comparison_markdown(const Comparison& comparison);
/// The comparison as JSON (options, each key with its samples and figures, the overall verdict).
nlohmann::json to_json(const Comparison& comparison);
/// A JUnit suite: a test case per key, failed when SLOWER, in error when UNKNOWN.
harness::JunitSuite junit_suite(const Comparison& comparison, const std::string& name);

}  // namespace mlarope::reports
