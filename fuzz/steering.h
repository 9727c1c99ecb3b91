// SPDX-License-Identifier: Apache-2.0
// Steering a fuzz run to what its backend supports. Before the campaign, drawn cases are
// offered to the backend's `supports` (their data made, nothing computed): first from every
// option until a few are accepted, then with one dimension of the call free at a time (op,
// tokens, dtypes, pair layouts, in place, CP, offsets, position ids, packed), the others held
// to what was accepted. The generator is then narrowed to the accepted values, dimension by
// dimension, and 7 cases in 8 are drawn from it; the 8th from every option, so that a backend
// that widens is still seen. Deterministic in (seed, size, options, backend): shards and a
// resumed run draw the same cases.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "backends/case_run.h"
#include "fuzz/generators.h"

namespace mlarope::harness {

/// What the warm-up learned.
struct Steering {
  /// False where the backend has no `supports`, accepted nothing, or accepted nearly all.
  bool active = false;
  std::int64_t probes = 0, accepted = 0;
  std::map<std::string, std::set<std::string>> kept;  ///< dimension -> values the backend took
  props::GenOptions narrowed;                         ///< the options with those values only
};

/// Probe `backend` (which must have `supports`) on cases of `full`.
Steering learn_steering(const props::GenOptions& full, const Backend& backend, std::uint64_t seed,
                        int size);

/// Whether the case of `case_seed` is drawn from the narrowed options (7 in 8 when active).
bool draws_steered(const Steering& steering, std::uint64_t case_seed);

/// What fuzz.json records ("steering"), and back (narrowing `full` again).
nlohmann::json to_json(const Steering& steering);
Steering steering_from_json(const nlohmann::json& json, const props::GenOptions& full);

/// One line for the summary: what the draws were narrowed to, or why they were not.
std::string describe(const Steering& steering);

}  // namespace mlarope::harness
