// `mlarope report`: read result files, write the page and summary, apply the gate.
#pragma once

#include <string>
#include <vector>

namespace mlarope::reports {

/// Options of `mlarope report`.
struct ReportOptions {
  std::vector<std::string> inputs;  ///< fuzz.json and Google Benchmark JSON files, any order
  std::string out_dir = "report";   ///< gets report.html and summary.md
  std::string baseline;             ///< optional: gate against this baseline
  std::string write_baseline;       ///< optional: write a baseline of this run here
  std::string baseline_backend = "host";  ///< which backend a written baseline keeps
  double threshold = 0.25;          ///< allowed relative drop when writing a baseline
};

/// Run the command: prints the Markdown summary and the page's path. Returns 0, or 1 when the
/// gate finds a regression. Throws mlarope::Error for unreadable or malformed inputs.
int report_command(const ReportOptions& options);

}  // namespace mlarope::reports
