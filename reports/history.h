// SPDX-License-Identifier: Apache-2.0
// The benchmark history: one small JSON per commit (its date, machine, each key's median and
// spread of the floor fraction, and what a gate flagged), kept in a folder that CI carries
// from run to run, and drawn as the trend of each op's floor fraction over the commits.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "dashboard.h"

namespace mlarope::reports {

/// One commit's benchmarks.
struct HistoryEntry {
  std::string commit;   ///< the commit measured (a hash, or what the caller named)
  std::string date;     ///< ISO 8601 UTC, when it was recorded
  std::string machine;  ///< Machine::describe() of the run
  std::string gate;     ///< the gate's verdict that run ("" when none ran)
  std::map<std::string, KeySummary> keys;  ///< key -> its repetitions summed up
  std::set<std::string> flagged;           ///< keys the gate found SLOWER or UNKNOWN
};

/// The entries of a history folder, oldest first.
struct History {
  std::string dir;
  std::vector<HistoryEntry> entries;
  std::vector<std::string> skipped;  ///< "file: why" for each entry that could not be read
};

/// An entry as its JSON file holds it, and back. from_json throws mlarope::Error on a
/// document of another shape.
nlohmann::json to_json(const HistoryEntry& entry);
HistoryEntry history_entry_from_json(const nlohmann::json& json);

/// Writes `entry` as DIR/<commit>.json (the folder is created; a commit recorded again
/// replaces its file) and returns the file's path. Throws mlarope::Error when it cannot.
std::string record_history(const std::string& dir, const HistoryEntry& entry);

/// Every *.json of `dir`, oldest first (by date, then commit); a file that is not an entry is
/// named in `skipped`, not fatal. A missing folder is an empty history.
History read_history(const std::string& dir);

/// The commit being measured: $GITHUB_SHA, $CI_COMMIT_SHA, else `git rev-parse HEAD` in the
/// working directory, else "unknown".
std::string current_commit();

/// The trend of each op's median floor fraction over the commits, one line per
/// backend/shape, points a gate flagged ringed in red (HTML with inline SVG).
std::string history_html(const History& history);
/// One line for the summary: how many commits, from where, what was skipped.
std::string history_markdown(const History& history);

}  // namespace mlarope::reports
