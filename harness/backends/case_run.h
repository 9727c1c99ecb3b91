// SPDX-License-Identifier: Apache-2.0
// Running a case on a backend: the call descriptor built from the case's arrays, outputs
// allocated in the activation dtype.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/case_file.h"
#include "mlarope/backend.h"
#include "mlarope/error.h"
#include "mlarope/ops.h"
#include "positions.h"

namespace mlarope::harness {

/// What a backend throws for a call it does not compute (a plugin declining a flag
/// combination, or lacking an op): counted as not supported, never as a failure.
class Unsupported : public Error {
 public:
  using Error::Error;
};

/// The primitives of one backend, called on host memory (a device backend copies in and out).
struct Backend {
  std::string name;
  std::function<void(const RopeCall&)> rope;
  std::function<void(const RopeInplaceCall&)> rope_inplace;
  std::function<void(const RopeBackwardCall&)> rope_backward;
  std::function<void(const RopeBackwardInplaceCall&)> rope_backward_inplace;
  std::function<void(const KvSplitCall&)> kv_split;
  std::function<void(const KvSplitBackwardCall&)> kv_split_backward;
  /// Optional: YaRN cos/sin tables (a backend without it declines the yarn_tables op).
  std::function<void(const YarnTablesCall&)> yarn_tables;
  /// Optional: the same backend running blocks and threads in another order (host executor).
  std::function<Backend(std::uint64_t order_seed)> with_order_seed;
  /// Optional: the same backend recording each launch's memory accesses, a call that races
  /// throwing (the races check; Triton kernels under the interpreter). The host backend has
  /// none: its GPU model checks every launch, so a race fails whichever call reaches it.
  std::function<Backend()> with_race_check;
  /// Optional: record the calls `launches` makes into a graph without running them, and return
  /// a function that replays the graph, re-reading the buffers at replay (docs/semantics.md §6).
  std::function<std::function<void()>(const std::function<void()>& launches)> capture;
  /// Optional: what the GPU model measured of the launches since the last take (host).
  std::function<std::vector<ModelLaunchStats>()> take_model_stats;
  /// Optional: make the calls that follow run the named variant (FuzzOptions::variants).
  std::function<void(const std::string& variant)> select_variant;
  /// Optional: whether the backend computes the case's call, asked without computing it: "" when
  /// it does, else why not (what its Unsupported would say). The fuzz steers its draws with it.
  std::function<std::string(const Case& c)> supports;
  /// Optional: told how long the reference took on a case, before the backend's first call of
  /// it (a watched backend in a worker process derives its call time limit from it).
  std::function<void(double reference_seconds)> expect_time;
};

/// The CPU reference as a Backend.
Backend reference_backend();

/// The backends this build has, by name ("reference", "host", "cuda").
std::vector<std::string> backend_names();
/// The backend called `name` ("plugin:PATH" loads a kernel plugin, plugin_backend.h); throws
/// mlarope::Error listing the known names otherwise.
Backend find_backend(const std::string& name);

/// The Positions of a case, pointing into its arrays.
Positions positions_of(const Case& c);
/// The table row of each row of a case (docs/semantics.md §2), its rows those of the op's
/// activation, in the order the reference walks them.
reference::RowMap row_map(const Case& c);
/// The Rotation of a case, pointing into its cos/sin arrays.
Rotation rotation_of(const Case& c);

/// Run the case's op on `backend`; outputs are in the activation dtype.
CaseOutputs run_case(const Case& c, const Backend& backend);

/// The minimum memory traffic of a case's op (the performance model of docs/architecture.md): every
/// input read once and every output written once (in place: only the rope slices, read and
/// written), and one cos and one sin row per activation row.
std::int64_t minimum_bytes(const Case& c);

}  // namespace mlarope::harness
