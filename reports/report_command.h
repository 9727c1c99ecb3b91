// SPDX-License-Identifier: Apache-2.0
// `mlarope report` and `mlarope compare`: read result files, write the page, the summary and
// the files CI systems and dashboards read, and apply the gate.
#pragma once

#include <string>
#include <vector>

#include "compare.h"

namespace mlarope::reports {

/// The gate's settings as the command line gives them.
struct GateOptions {
  double alpha = 0.002;
  double host_min_effect = 0.10;
  double gpu_min_effect = 0.05;
  std::vector<std::string> key_min_effect;  ///< "KEY=FRACTION", KEY a key or a key prefix
  int min_samples = 9;
  /// CompareOptions of these; throws mlarope::Error on a malformed KEY=FRACTION.
  CompareOptions compare_options() const;
};

/// Options of `mlarope report`.
struct ReportOptions {
  std::vector<std::string> inputs;  ///< fuzz.json and Google Benchmark JSON files, any order
  std::string out_dir = "report";   ///< gets report.html, summary.md, junit.xml, bmf.json, ...
  std::string baseline;             ///< optional: gate against this stored baseline
  std::string history;              ///< optional: record this run here and draw the trend
  std::string commit;  ///< the commit a history entry names (default: current_commit())
  GateOptions gate;
};

/// Run `mlarope report`: prints the Markdown summary and the page's path; writes the files
/// of ReportOptions::out_dir; appends the summary to $GITHUB_STEP_SUMMARY when that is set.
/// Returns the gate's exit status (GateResult::exit_status; 0 without a gate). Throws
/// mlarope::Error for unreadable or malformed inputs.
int report_command(const ReportOptions& options);

/// Options of `mlarope compare`.
struct CompareCommandOptions {
  std::vector<std::string> base, change;                ///< Google Benchmark JSON files
  std::vector<std::string> repeat_base, repeat_change;  ///< the SLOWER keys measured again
  std::string out_dir = "compare";  ///< gets compare.json, summary.md, junit.xml
  std::string slower_keys;          ///< optional: write the SLOWER keys here, one a line
  GateOptions gate;
};

/// Run `mlarope compare`: the change's repetitions against the base's, key by key; with the
/// repeat files, the keys found SLOWER again stay SLOWER (confirm()). Prints the table and
/// returns 0 (pass), 1 (SLOWER) or 3 (UNKNOWN). Throws mlarope::Error on bad input.
int compare_command(const CompareCommandOptions& options);

}  // namespace mlarope::reports
