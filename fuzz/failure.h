// SPDX-License-Identifier: Apache-2.0
// Every failure is a file (docs/architecture.md rule 7): a failing case as a case directory
// (docs/semantics.md §7) with its spec, its check options and what failed, and the command that
// replays it.
#pragma once

#include <filesystem>
#include <string>

#include "checks/checks.h"
#include "checks/yarn_check.h"
#include "fuzz/case_spec.h"

namespace mlarope::props {

/// Where failures go: $MLAROPE_FAILURE_DIR, else <build dir>/failures.
std::filesystem::path failure_root();

/// The command that replays a failure directory: "<build>/mlarope check DIR --backend B", and
/// the `run` command that writes its outputs.
std::string replay_command(const std::filesystem::path& dir, const std::string& backend);

/// Write `dir` afresh: the case files of `c`, spec.json (the spec and its data seed),
/// checks.json (what `mlarope check` runs), report.txt (the results and `note`). Returns the
/// replay command.
std::string write_failure(const std::filesystem::path& dir, const CaseSpec& spec,
                          const harness::Case& c, const harness::CheckOptions& options,
                          const harness::CheckReport& report, const std::string& backend,
                          const std::string& note = "");

/// Write `dir` afresh for a failing yarn_tables case: yarn_case.json (what `mlarope check DIR`
/// replays) and report.txt. Returns the replay command.
std::string write_yarn_failure(const std::filesystem::path& dir, const harness::YarnCase& c,
                               const harness::CheckReport& report, const std::string& backend,
                               const std::string& note = "");

}  // namespace mlarope::props
