#include "kernel_resources.h"

#include <cxxabi.h>

#include <cstdlib>
#include <cctype>
#include <sstream>

#include "svg.h"

namespace mlarope::reports {
namespace {

void erase_all(std::string& s, const std::string& what) {
  for (std::size_t at; (at = s.find(what)) != std::string::npos;) s.erase(at, what.size());
}

// "void mlarope::cuda_launch::(anonymous namespace)::rope_kernel<mlarope::kernels::X<float> >(...)"
// -> "rope_kernel<X<float> >": no return type, namespaces or parameters.
std::string short_name(const std::string& mangled) {
  int status = 0;
  char* raw = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && raw ? raw : mangled;
  std::free(raw);
  erase_all(name, "(anonymous namespace)::");
  if (const auto paren = name.find('('); paren != std::string::npos) name.resize(paren);
  int depth = 0;  // drop the return type and namespaces: after the last " " or "::" outside <>
  std::size_t start = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    if (name[i] == '>') --depth;
    if (depth == 0 && name[i] == ' ') start = i + 1;
    if (depth == 0 && name[i] == ':' && i + 1 < name.size() && name[i + 1] == ':') start = i + 2;
  }
  name = name.substr(start);
  erase_all(name, "mlarope::kernels::");
  erase_all(name, "mlarope::");
  return name;
}

// The number just before " <what>" in `line` ("12 bytes spill stores": 12), or 0.
long long number_before(const std::string& line, const std::string& what) {
  const std::size_t at = line.find(" " + what);
  if (at == std::string::npos) return 0;
  std::size_t start = at;
  while (start > 0 && std::isdigit(static_cast<unsigned char>(line[start - 1]))) --start;
  return start < at ? std::stoll(line.substr(start, at - start)) : 0;
}

// The text between `open` and the next `close` after it, or "".
std::string between(const std::string& line, const std::string& open, const std::string& close) {
  const std::size_t a = line.find(open);
  if (a == std::string::npos) return "";
  const std::size_t b = line.find(close, a + open.size());
  return b == std::string::npos ? "" : line.substr(a + open.size(), b - a - open.size());
}

}  // namespace

bool is_ptxas_log(const std::string& text) { return text.find("ptxas info") != std::string::npos; }

std::vector<KernelResource> parse_ptxas(const std::string& text) {
  std::vector<KernelResource> kernels;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("Compiling entry function '") != std::string::npos) {
      kernels.push_back({short_name(between(line, "entry function '", "'")), between(line, "for '", "'")});
    } else if (kernels.empty()) {
      continue;
    } else if (line.find("bytes stack frame") != std::string::npos) {
      KernelResource& k = kernels.back();
      k.stack = number_before(line, "bytes stack frame");
      k.spill_stores = number_before(line, "bytes spill stores");
      k.spill_loads = number_before(line, "bytes spill loads");
    } else if (line.find(" registers") != std::string::npos && line.find("Used ") != std::string::npos) {
      kernels.back().registers = static_cast<int>(number_before(line, "registers"));
      kernels.back().smem = number_before(line, "bytes smem");
    }
  }
  return kernels;
}

std::string kernel_resources_markdown(const std::vector<KernelResource>& kernels) {
  if (kernels.empty()) return "";
  std::ostringstream md;
  int spilling = 0;
  for (const KernelResource& k : kernels) spilling += k.spill_stores + k.spill_loads > 0;
  md << "## Kernel resources (ptxas)\n\n" << kernels.size() << " kernels, " << spilling
     << " with spills.\n\n| kernel | arch | registers | spill stores | spill loads | stack | smem |\n"
        "|---|---|---|---|---|---|---|\n";
  for (const KernelResource& k : kernels)
    md << "| " << k.kernel << " | " << k.arch << " | " << k.registers << " | " << k.spill_stores << " | "
       << k.spill_loads << " | " << k.stack << " | " << k.smem << " |\n";
  md << "\n";
  return md.str();
}

std::string kernel_resources_html(const std::vector<KernelResource>& kernels) {
  if (kernels.empty()) return "";
  std::ostringstream h;
  h << "<h2>Kernel resources (ptxas)</h2>\n<table><tr><th>kernel</th><th>arch</th><th>registers</th>"
       "<th>spill stores</th><th>spill loads</th><th>stack</th><th>smem</th></tr>\n";
  for (const KernelResource& k : kernels) {
    h << "<tr><td>" << escape(k.kernel) << "</td><td>" << k.arch << "</td><td>" << k.registers << "</td><td>"
      << k.spill_stores << "</td><td>" << k.spill_loads << "</td><td>" << k.stack << "</td><td>" << k.smem
      << "</td></tr>\n";
  }
  h << "</table>\n";
  return h.str();
}

}  // namespace mlarope::reports
