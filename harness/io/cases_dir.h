// SPDX-License-Identifier: Apache-2.0
// Where the tests find the Megatron cases (data/megatron, described in data/README.md).
#pragma once

#include <cstdlib>
#include <string>

#ifndef MLAROPE_DEFAULT_CASES_DIR
#define MLAROPE_DEFAULT_CASES_DIR ""
#endif

namespace mlarope::harness {

/// $MLAROPE_CASES_DIR when set and not empty (ci/gpu-check.sh points it at .gpu-deps/cases),
/// else the folder CMake was configured with (-DMLAROPE_CASES_DIR, default data/megatron).
inline std::string megatron_cases_dir() {
  const char* value = std::getenv("MLAROPE_CASES_DIR");
  return value != nullptr && *value != '\0' ? std::string(value)
                                            : std::string(MLAROPE_DEFAULT_CASES_DIR);
}

}  // namespace mlarope::harness
