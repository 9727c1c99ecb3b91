// SPDX-License-Identifier: Apache-2.0
// make_faulty_sources: writes the fault-variant build of the host kernels (test builds only).
//
// The production sources hold no fault code. This tool copies the kernel headers named on the
// command line and host/host_kernels.cpp into an output folder and applies, in the copies,
// the edits of a fault list (kernel_faults.txt): each edit replaces an expression E by
// `(MLAROPE_FAULT(name) ? (E') : (E))` or inserts `if (MLAROPE_FAULT(name)) { S }` before or
// after an anchor, so one compiled copy holds every fault, selected at run time
// (fault_selector.h). The copies of the kernel headers move into the inline namespace
// mlarope::kernels::faulty, and kernel_table() of host_kernels.cpp becomes
// faulty_kernel_table(), so the copies link beside the production build in one binary.
//
// Every edit must match its text exactly `count` times (default 1): when a kernel changes
// under a fault, the build fails here rather than quietly testing nothing.
//
//   make_faulty_sources FAULTS_FILE SOURCE_ROOT OUT_ROOT FILE...
//     FILE: paths under SOURCE_ROOT to copy (kernels/*.h, host/host_kernels.cpp)
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Edit {
  std::string fault;
  std::string file;
  std::string kind;         // "expression", "before" or "after"
  std::string text;         // the expression, or the anchor line
  std::string replacement;  // the faulty expression, or the statement to insert
  int count = 1;
  int line = 0;  // in the fault list
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text)) throw std::runtime_error("cannot write " + path);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  const auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// The fault list: "key: value" lines; '#' starts a comment line. "fault:" names the fault of
// the edits that follow; "file:" starts an edit; then "expression:" + "becomes:", or
// "before:" / "after:" + "insert:", and optionally "count:".
std::vector<Edit> parse_faults(const std::string& path) {
  std::istringstream in(read_file(path));
  std::vector<Edit> edits;
  std::string fault, line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (trim(line).empty() || trim(line)[0] == '#') continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos)
      throw std::runtime_error(path + ":" + std::to_string(number) + ": expected 'key: value'");
    const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    const auto where = path + ":" + std::to_string(number) + ": ";
    if (key == "fault") {
      fault = value;
    } else if (key == "file") {
      if (fault.empty()) throw std::runtime_error(where + "'file' before any 'fault'");
      edits.push_back({fault, value, "", "", "", 1, number});
    } else if (edits.empty()) {
      throw std::runtime_error(where + "'" + key + "' before any 'file'");
    } else if (key == "expression" || key == "before" || key == "after") {
      edits.back().kind = key;
      edits.back().text = value;
    } else if (key == "becomes" || key == "insert") {
      edits.back().replacement = value;
    } else if (key == "count") {
      edits.back().count = std::stoi(value);
    } else {
      throw std::runtime_error(where + "unknown key '" + key + "'");
    }
  }
  for (const Edit& e : edits)
    if (e.kind.empty() || e.text.empty() || e.replacement.empty())
      throw std::runtime_error(path + ":" + std::to_string(e.line) + ": incomplete edit of fault " +
                               e.fault);
  return edits;
}

int occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size()))
    ++n;
  return n;
}

// Replace every occurrence of `what`, which must occur exactly `count` times.
std::string replace_counted(std::string text, const std::string& what, const std::string& with,
                            int count, const std::string& context) {
  const int found = occurrences(text, what);
  if (found != count)
    throw std::runtime_error(context + ": expected " + std::to_string(count) +
                             " occurrence(s) of '" + what + "', found " + std::to_string(found));
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + with.size())) {
    text.replace(at, what.size(), with);
  }
  return text;
}

std::string apply_edit(const std::string& text, const Edit& e) {
  const std::string selected = "MLAROPE_FAULT(" + e.fault + ")";
  const std::string context = "fault " + e.fault + " in " + e.file;
  if (e.kind == "expression")
    return replace_counted(text, e.text,
                           "(" + selected + " ? (" + e.replacement + ") : (" + e.text + "))",
                           e.count, context);
  const std::string inserted = "if (" + selected + ") { " + e.replacement + " }";
  if (e.kind == "after")
    return replace_counted(text, e.text, e.text + "\n" + inserted, e.count, context);
  return replace_counted(text, e.text, inserted + "\n" + e.text, e.count, context);
}

// The structural rewrites that let the copy link beside the production build.
std::string make_distinct(std::string text, const std::string& file) {
  const std::string context = "copy of " + file;
  if (file.rfind("kernels/", 0) == 0) {
    text =
        replace_counted(text, "#pragma once\n",
                        "#pragma once\n#include \"test_support/fault_selector.h\"\n", 1, context);
    text = replace_counted(text, "namespace mlarope::kernels {\n",
                           "namespace mlarope::kernels {\ninline namespace faulty {\n", 1, context);
    return replace_counted(text, "}  // namespace mlarope::kernels\n",
                           "}  // namespace faulty\n}  // namespace mlarope::kernels\n", 1,
                           context);
  }
  if (file == "host/host_kernels.cpp") {
    text = replace_counted(
        text, "#include \"host/host_kernels.h\"\n",
        "#include \"host/host_kernels.h\"\n#include \"test_support/fault_selector.h\"\n", 1,
        context);
    return replace_counted(text, "const KernelTable& kernel_table() {",
                           "const KernelTable& faulty_kernel_table() {", 1, context);
  }
  throw std::runtime_error("make_faulty_sources: no rule to copy " + file);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: make_faulty_sources FAULTS_FILE SOURCE_ROOT OUT_ROOT FILE...\n";
    return 2;
  }
  try {
    const std::vector<Edit> edits = parse_faults(argv[1]);
    const std::string source_root = argv[2], out_root = argv[3];
    std::map<std::string, int> edits_per_file;
    for (int i = 4; i < argc; ++i) {
      const std::string file = argv[i];
      std::string text = make_distinct(read_file(source_root + "/" + file), file);
      for (const Edit& e : edits)
        if (e.file == file) {
          text = apply_edit(text, e);
          ++edits_per_file[file];
        }
      write_file(out_root + "/" + file, text);
    }
    for (const Edit& e : edits)
      if (edits_per_file.count(e.file) == 0)
        throw std::runtime_error(
            std::string(argv[1]) + ":" + std::to_string(e.line) + ": fault " + e.fault + " edits " +
            e.file + ", which is not copied (shared by the production and faulty builds)");
  } catch (const std::exception& e) {
    std::cerr << "make_faulty_sources: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
