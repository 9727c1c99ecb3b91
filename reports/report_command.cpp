#include "report_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>

#include "mlarope/error.h"
#include "report.h"

namespace mlarope::reports {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw Error(path.string() + ": cannot write");
}

}  // namespace

int report_command(const ReportOptions& o) {
  std::vector<BenchResult> bench;
  std::vector<FuzzReport> fuzz;
  for (const std::string& path : o.inputs) {
    json j = read_json(path);
    if (j.is_object() && j.contains("benchmarks")) {
      const auto results = parse_benchmarks(j, path);
      bench.insert(bench.end(), results.begin(), results.end());
    } else if (j.is_object()) {
      fuzz.push_back({path, std::move(j)});
    } else {
      throw Error(path + ": expected a fuzz.json or Google Benchmark JSON object");
    }
  }
  GateResult gate;
  const bool gated = !o.baseline.empty();
  if (gated) gate = check_baseline(bench, read_json(o.baseline));
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) throw Error(o.out_dir + ": cannot create: " + ec.message());
  const std::string md = markdown_summary(bench, fuzz, gated ? &gate : nullptr);
  write_file(fs::path(o.out_dir) / "summary.md", md);
  write_file(fs::path(o.out_dir) / "report.html", html_page(bench, fuzz, gated ? &gate : nullptr));
  if (!o.write_baseline.empty())
    write_file(o.write_baseline, make_baseline(bench, o.baseline_backend, o.threshold).dump(1) + "\n");
  std::cout << md << "page: " << (fs::path(o.out_dir) / "report.html").string() << "\n";
  return gated && !gate.ok() ? 1 : 0;
}

}  // namespace mlarope::reports
