// SPDX-License-Identifier: Apache-2.0
// Anyone's kernels, through the plugin ABI (include/mlarope/plugin.h), as a harness Backend.
#pragma once

#include <string>

#include "backends/case_run.h"

namespace mlarope::harness {

/// The plugin library at `path` (`--backend plugin:PATH`). Throws mlarope::Error naming the
/// path and what is wrong when the library cannot be loaded, lacks MLAROPE_PLUGIN_ENTRY, or
/// speaks another ABI version, or takes CUDA memory where no device is. Its calls throw
/// Unsupported for what the plugin declines or does not provide, and Error with the plugin's
/// message when a call fails. A CUDA-memory plugin runs on device copies of the call's views
/// (DeviceMirror) and one CUDA stream of the backend.
Backend plugin_backend(const std::string& path);

}  // namespace mlarope::harness
