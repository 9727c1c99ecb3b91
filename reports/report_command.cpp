#include "report_command.h"

#include <glob.h>

#include <algorithm>
#include <map>
#include <set>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "mlarope/error.h"
#include "fuzz/fuzz.h"
#include "kernel_resources.h"
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

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The files a folder stands for: its fuzz.json (what `mlarope fuzz --out DIR` writes), else
// the fuzz.json of each shard-* subfolder (a sharded run), else its *.json and ptxas.txt files.
std::vector<std::string> files_of_folder(const fs::path& dir) {
  if (fs::is_regular_file(dir / "fuzz.json")) return {(dir / "fuzz.json").string()};
  std::vector<std::string> shards, others;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("shard-", 0) == 0 && fs::is_regular_file(e.path() / "fuzz.json"))
      shards.push_back((e.path() / "fuzz.json").string());
    else if (e.is_regular_file() && (e.path().extension() == ".json" || name == "ptxas.txt"))
      others.push_back(e.path().string());
  }
  std::vector<std::string>& found = shards.empty() ? others : shards;
  std::sort(found.begin(), found.end());
  if (found.empty())
    throw Error(dir.string() + ": a folder with no fuzz.json, no shard-*/fuzz.json and no *.json or ptxas.txt");
  return found;
}

// Each input as files: a file as it is, a folder through files_of_folder, a pattern with * ? [
// (quoted, so the shell left it) through glob(3); a pattern matching nothing is an error.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::vector<std::string> matches;
    if (input.find_first_of("*?[") != std::string::npos && !fs::exists(input)) {
      glob_t g{};
      if (glob(input.c_str(), 0, nullptr, &g) == 0)
        for (std::size_t i = 0; i < g.gl_pathc; ++i) matches.push_back(g.gl_pathv[i]);
      globfree(&g);
      if (matches.empty()) throw Error(input + ": no file or folder matches");
    } else {
      matches.push_back(input);
    }
    for (const std::string& m : matches) {
      if (fs::is_directory(m)) {
        for (std::string& f : files_of_folder(m)) files.push_back(std::move(f));
      } else if (fs::exists(m)) {
        files.push_back(m);
      } else {
        throw Error(m + ": no such file or folder");
      }
    }
  }
  return files;
}

// One merged fuzz.json per sharded run: the reports of the shards of one campaign (one
// folder of shard-* folders, one backend, seed and shard count) summed with FuzzStats::merge, their failures' folders made
// relative to the campaign's folder, and each shard's rate kept under "shards".
std::vector<FuzzReport> merge_shards(std::vector<FuzzReport> reports) {
  std::map<std::string, std::vector<FuzzReport*>> campaigns;
  for (FuzzReport& r : reports) {
    const json& j = r.json;
    if (!j.contains("shard") || j["shard"].value("count", 1) < 2 || j["shard"].contains("merged")) continue;
    const std::string folder = fs::path(r.where).parent_path().parent_path().string();
    campaigns[folder + "|" + j.value("backend", "") + "|" + std::to_string(j.value("seed", 0ULL)) + "|" +
              std::to_string(j["shard"].value("count", 1))].push_back(&r);
  }
  std::vector<FuzzReport> out;
  std::set<const FuzzReport*> merged;
  for (auto& [key, shards] : campaigns) {
    if (shards.size() < 2) continue;
    harness::FuzzStats total;
    json rates = json::array();
    for (FuzzReport* r : shards) {
      harness::FuzzStats s = harness::stats_from_json(r->json);
      const fs::path folder = fs::path(r->where).parent_path().filename();
      for (harness::FuzzFailure& f : s.failures)
        if (!f.dir.empty()) f.dir = (folder / f.dir).string();
      total.merge(s);  // adds counts, not seconds: the shards run at the same time
      total.seconds = std::max(total.seconds, s.seconds);
      rates.push_back({{"where", r->where}, {"index", r->json["shard"].value("index", 0)},
                       {"cases", s.cases}, {"cases_per_second", s.rate()}, {"failing_cases", s.failing_cases}});
      merged.insert(r);
    }
    const json& first = shards.front()->json;
    harness::FuzzOptions o;
    o.backend = first.value("backend", "");
    o.seed = first.value("seed", 1ULL);
    o.size = first.value("size", 100);
    o.jobs = first.value("jobs", 1);
    json j = harness::to_json(total, o);
    j["ops"] = first.value("ops", json::array());
    j["shard"] = {{"count", first["shard"].value("count", 1)}, {"merged", shards.size()},
                  {"source", first["shard"].value("source", "")}};
    j["shards"] = rates;
    const fs::path campaign = fs::path(shards.front()->where).parent_path().parent_path();
    out.push_back({(campaign / "shard-*").string() + " (" + std::to_string(shards.size()) + " shards merged)", j});
  }
  for (FuzzReport& r : reports)
    if (!merged.count(&r)) out.push_back(std::move(r));
  return out;
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
  std::vector<KernelResource> kernels;
  for (const std::string& path : expand_inputs(o.inputs)) {
    if (path.size() >= 4 && path.compare(path.size() - 4, 4, ".txt") == 0) {
      const std::string text = read_text(path);
      if (!is_ptxas_log(text)) throw Error(path + ": expected ptxas -v lines (build/ptxas.txt)");
      const auto found = parse_ptxas(text);
      kernels.insert(kernels.end(), found.begin(), found.end());
      continue;
    }
    json j = read_json(path);
    if (j.is_object() && j.contains("benchmarks")) {
      const auto results = parse_benchmarks(j, path);
      bench.insert(bench.end(), results.begin(), results.end());
    } else if (j.is_object()) {
      fuzz.push_back({path, std::move(j)});
    } else {
      throw Error(path + ": expected a fuzz.json, Google Benchmark JSON or ptxas.txt");
    }
  }
  fuzz = merge_shards(std::move(fuzz));
  GateResult gate;
  const bool gated = !o.baseline.empty();
  if (gated) gate = check_baseline(bench, read_json(o.baseline));
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) throw Error(o.out_dir + ": cannot create: " + ec.message());
  const std::string md = markdown_summary(bench, fuzz, gated ? &gate : nullptr, kernels);
  write_file(fs::path(o.out_dir) / "summary.md", md);
  write_file(fs::path(o.out_dir) / "report.html", html_page(bench, fuzz, gated ? &gate : nullptr, kernels));
  if (!o.write_baseline.empty())
    write_file(o.write_baseline, make_baseline(bench, o.baseline_backend, o.threshold).dump(1) + "\n");
  std::cout << md << "page: " << (fs::path(o.out_dir) / "report.html").string() << "\n";
  return gated && !gate.ok() ? 1 : 0;
}

}  // namespace mlarope::reports
