// Running a case on a backend: the call descriptor built from the case's arrays, outputs
// allocated in the activation dtype.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "case_file.h"
#include "mlarope/ops.h"

namespace mlarope::harness {

/// The primitives of one backend, called on host memory (a device backend copies in and out).
struct Backend {
  std::string name;
  std::function<void(const RopeCall&)> rope;
  std::function<void(const RopeInplaceCall&)> rope_inplace;
  std::function<void(const RopeBackwardCall&)> rope_backward;
  std::function<void(const RopeBackwardInplaceCall&)> rope_backward_inplace;
  std::function<void(const KvSplitCall&)> kv_split;
  std::function<void(const KvSplitBackwardCall&)> kv_split_backward;
};

/// The CPU reference as a Backend.
Backend reference_backend();

/// The backends this build has, by name ("reference", "host", "cuda").
std::vector<std::string> backend_names();
/// The backend called `name`; throws mlarope::Error listing the known names otherwise.
Backend find_backend(const std::string& name);

/// The Positions of a case, pointing into its arrays.
Positions positions_of(const Case& c);
/// The Rotation of a case, pointing into its cos/sin arrays.
Rotation rotation_of(const Case& c);

/// Run the case's op on `backend`; outputs are in the activation dtype.
CaseOutputs run_case(const Case& c, const Backend& backend);

}  // namespace mlarope::harness
