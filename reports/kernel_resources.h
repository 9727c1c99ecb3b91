// What ptxas said of each kernel (-Xptxas -v, collected into build/ptxas.txt by the build):
// registers, spills, stack and shared memory, for the report.
#pragma once

#include <string>
#include <vector>

namespace mlarope::reports {

struct KernelResource {
  std::string kernel;  ///< demangled, namespaces dropped: "kv_split_backward_kernel<float, 1>"
  std::string arch;    ///< "sm_90"
  int registers = 0;
  long long spill_stores = 0, spill_loads = 0, stack = 0, smem = 0;  ///< bytes
};

/// The kernels of ptxas -v output (any other line is ignored), in the order given.
std::vector<KernelResource> parse_ptxas(const std::string& text);
/// True when `text` holds ptxas -v lines.
bool is_ptxas_log(const std::string& text);

/// The Markdown and HTML tables of the report ("" when there are no kernels).
std::string kernel_resources_markdown(const std::vector<KernelResource>& kernels);
std::string kernel_resources_html(const std::vector<KernelResource>& kernels);

}  // namespace mlarope::reports
