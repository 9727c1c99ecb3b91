// SPDX-License-Identifier: Apache-2.0
// The report's tables of what ptxas said of each kernel (mlarope::parse_ptxas of
// build/ptxas.txt): registers, spills, stack and shared memory.
#pragma once

#include <string>
#include <vector>

#include "mlarope/timing.h"

namespace mlarope::reports {

using mlarope::KernelResource;

/// The Markdown and HTML tables of the report ("" when there are no kernels).
std::string kernel_resources_markdown(const std::vector<KernelResource>& kernels);
std::string kernel_resources_html(const std::vector<KernelResource>& kernels);

}  // namespace mlarope::reports
