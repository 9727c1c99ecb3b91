// SPDX-License-Identifier: Apache-2.0
#include "kernel_resources.h"

#include <sstream>

#include "svg.h"

namespace mlarope::reports {

std::string kernel_resources_markdown(const std::vector<KernelResource>& kernels) {
  if (kernels.empty()) return "";
  std::ostringstream md;
  int spilling = 0;
  for (const KernelResource& k : kernels) spilling += k.spill_stores + k.spill_loads > 0;
  md << "## Kernel resources (ptxas)\n\n"
     << kernels.size() << " kernels, " << spilling
     << " with spills.\n\n| kernel | arch | registers | spill stores | spill loads | stack | smem "
        "|\n"
        "|---|---|---|---|---|---|---|\n";
  for (const KernelResource& k : kernels)
    md << "| " << k.kernel << " | " << k.arch << " | " << k.registers << " | " << k.spill_stores
       << " | " << k.spill_loads << " | " << k.stack << " | " << k.smem << " |\n";
  md << "\n";
  return md.str();
}

std::string kernel_resources_html(const std::vector<KernelResource>& kernels) {
  if (kernels.empty()) return "";
  std::ostringstream h;
  h << "<h2>Kernel resources "
       "(ptxas)</h2>\n<table><tr><th>kernel</th><th>arch</th><th>registers</th>"
       "<th>spill stores</th><th>spill loads</th><th>stack</th><th>smem</th></tr>\n";
  for (const KernelResource& k : kernels) {
    h << "<tr><td>" << escape(k.kernel) << "</td><td>" << k.arch << "</td><td>" << k.registers
      << "</td><td>" << k.spill_stores << "</td><td>" << k.spill_loads << "</td><td>" << k.stack
      << "</td><td>" << k.smem << "</td></tr>\n";
  }
  h << "</table>\n";
  return h.str();
}

}  // namespace mlarope::reports
