// SPDX-License-Identifier: Apache-2.0
#include "report_command.h"

#include <glob.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "baseline.h"
#include "dashboard.h"
#include "fuzz/fuzz.h"
#include "history.h"
#include "io/junit.h"
#include "kernel_resources.h"
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
    if (e.is_directory() && name.rfind("shard-", 0) == 0 &&
        fs::is_regular_file(e.path() / "fuzz.json"))
      shards.push_back((e.path() / "fuzz.json").string());
    else if (e.is_regular_file() && (e.path().extension() == ".json" || name == "ptxas.txt"))
      others.push_back(e.path().string());
  }
  std::vector<std::string>& found = shards.empty() ? others : shards;
  std::sort(found.begin(), found.end());
  if (found.empty())
    throw Error(dir.string() +
                ": a folder with no fuzz.json, no shard-*/fuzz.json and no *.json or ptxas.txt");
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
// folder of shard-* folders, one backend, seed and shard count) summed with FuzzStats::merge, their
// failures' folders made relative to the campaign's folder, and each shard's rate kept under
// "shards".
std::vector<FuzzReport> merge_shards(std::vector<FuzzReport> reports) {
  std::map<std::string, std::vector<FuzzReport*>> campaigns;
  for (FuzzReport& r : reports) {
    const json& j = r.json;
    if (!j.contains("shard") || j["shard"].value("count", 1) < 2 || j["shard"].contains("merged"))
      continue;
    const std::string folder = fs::path(r.where).parent_path().parent_path().string();
    campaigns[folder + "|" + j.value("backend", "") + "|" + std::to_string(j.value("seed", 0ULL)) +
              "|" + std::to_string(j["shard"].value("count", 1))]
        .push_back(&r);
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
      rates.push_back({{"where", r->where},
                       {"index", r->json["shard"].value("index", 0)},
                       {"cases", s.cases},
                       {"cases_per_second", s.rate()},
                       {"failing_cases", s.failing_cases}});
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
    j["shard"] = {{"count", first["shard"].value("count", 1)},
                  {"merged", shards.size()},
                  {"source", first["shard"].value("source", "")}};
    j["shards"] = rates;
    const fs::path campaign = fs::path(shards.front()->where).parent_path().parent_path();
    out.push_back(
        {(campaign / "shard-*").string() + " (" + std::to_string(shards.size()) + " shards merged)",
         j});
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

// The Google Benchmark results of `files`, and the machine of the first one.
std::vector<BenchResult> read_benchmarks(const std::vector<std::string>& files, Machine* machine) {
  std::vector<BenchResult> results;
  for (const std::string& path : files) {
    const json j = read_json(path);
    const auto found = parse_benchmarks(j, path);
    if (found.empty())
      throw Error(path + ": no repetitions (only aggregates, or every benchmark failed)");
    if (machine && results.empty()) *machine = machine_of(j);
    results.insert(results.end(), found.begin(), found.end());
  }
  return results;
}

// The fuzz reports as JUnit suites (a case per check), and the gate's (a case per key).
std::vector<harness::JunitSuite> junit_suites(const std::vector<FuzzReport>& fuzz,
                                              const GateResult* gate) {
  std::vector<harness::JunitSuite> suites;
  for (const FuzzReport& f : fuzz) {
    harness::FuzzOptions o;
    o.backend = f.json.value("backend", std::string("unknown"));
    o.seed = f.json.value("seed", 0ULL);
    o.size = f.json.value("size", 100);
    o.out = fs::path(f.where).parent_path();
    suites.push_back(harness::junit_suite(harness::stats_from_json(f.json), o));
  }
  if (gate && gate->applied)
    suites.push_back(junit_suite(gate->comparison, "mlarope gate: " + gate->title));
  return suites;
}

// Appends `markdown` to the file $GITHUB_STEP_SUMMARY names (GitHub Actions shows it on the
// run's page), when it is set.
void append_step_summary(const std::string& markdown) {
  const char* path = std::getenv("GITHUB_STEP_SUMMARY");
  if (!path || !*path) return;
  std::ofstream out(path, std::ios::app);
  out << markdown << "\n";
  if (!out) throw Error(std::string("$GITHUB_STEP_SUMMARY ") + path + ": cannot append");
}

}  // namespace

CompareOptions GateOptions::compare_options() const {
  CompareOptions c;
  c.alpha = alpha;
  c.host_min_effect = host_min_effect;
  c.gpu_min_effect = gpu_min_effect;
  c.min_samples = min_samples;
  if (!(alpha > 0 && alpha < 1))
    throw Error("--alpha " + std::to_string(alpha) + ": expected 0 < alpha < 1");
  if (min_samples < 2)
    throw Error("--min-samples " + std::to_string(min_samples) + ": expected at least 2");
  for (const std::string& item : key_min_effect) {
    const std::size_t eq = item.rfind('=');
    char* end = nullptr;
    const double value = eq == std::string::npos ? 0 : std::strtod(item.c_str() + eq + 1, &end);
    if (eq == std::string::npos || eq == 0 || end == item.c_str() + eq + 1 || *end != '\0' ||
        !(value >= 0))
      throw Error("--key-min-effect " + item +
                  ": expected KEY=FRACTION (a key or key prefix, a fraction >= 0)");
    c.key_min_effect[item.substr(0, eq)] = value;
  }
  return c;
}

int report_command(const ReportOptions& o) {
  const CompareOptions compare_options = o.gate.compare_options();
  std::vector<BenchResult> bench;
  std::vector<FuzzReport> fuzz;
  std::vector<KernelResource> kernels;
  Machine machine;
  bool have_machine = false;
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
      if (!have_machine && !results.empty()) machine = machine_of(j), have_machine = true;
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
  if (gated) {
    if (bench.empty())
      throw Error("--baseline " + o.baseline + ": no benchmark results among the inputs to gate");
    gate = check_baseline(bench, machine, read_json(o.baseline), o.baseline, compare_options);
  }
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) throw Error(o.out_dir + ": cannot create: " + ec.message());
  History history;
  const bool with_history = !o.history.empty();
  if (with_history) {
    if (!bench.empty()) {
      HistoryEntry entry;
      entry.commit = o.commit.empty() ? current_commit() : o.commit;
      entry.date = harness::iso8601_now();
      entry.machine = machine.describe();
      entry.keys = summarize(bench);
      if (gated && gate.applied) {
        entry.gate = to_string(gate.comparison.overall());
        for (const KeyComparison& k : gate.comparison.keys)
          if (k.verdict == Verdict::slower || k.verdict == Verdict::unknown)
            entry.flagged.insert(k.key);
      }
      std::cerr << "report: history entry " << record_history(o.history, entry) << "\n";
    }
    history = read_history(o.history);
    for (const std::string& skipped : history.skipped)
      std::cerr << "report: history: skipped " << skipped << "\n";
  }
  const GateResult* gate_shown = gated ? &gate : nullptr;
  const History* history_shown = with_history ? &history : nullptr;
  const std::string md = markdown_summary(bench, fuzz, gate_shown, kernels, history_shown);
  const fs::path out(o.out_dir);
  write_file(out / "summary.md", md);
  write_file(out / "report.html", html_page(bench, fuzz, gate_shown, kernels, history_shown));
  harness::write_junit((out / "junit.xml").string(), junit_suites(fuzz, gate_shown));
  if (!bench.empty()) {
    const auto summaries = summarize(bench);
    write_file(out / "bmf.json", bencher_bmf(summaries).dump(1) + "\n");
    write_file(out / "benchmark-action.json", benchmark_action(summaries).dump(1) + "\n");
  }
  append_step_summary(md);
  std::cout << md << "page: " << (out / "report.html").string() << "\n";
  return gated ? gate.exit_status() : 0;
}

int compare_command(const CompareCommandOptions& o) {
  const CompareOptions options = o.gate.compare_options();
  if (o.base.empty() || o.change.empty())
    throw Error("compare: --base and --change each need at least one file");
  if (o.repeat_base.empty() != o.repeat_change.empty())
    throw Error("compare: --repeat-base and --repeat-change go together");
  Machine base_machine, change_machine;
  const Samples base = floor_fraction_samples(read_benchmarks(o.base, &base_machine));
  const Samples change = floor_fraction_samples(read_benchmarks(o.change, &change_machine));
  bool shared = false;
  for (const auto& [key, _] : base) shared = shared || change.count(key) > 0;
  if (!shared)
    throw Error("compare: the base and the change share no benchmark key (base has " +
                base.begin()->first + ", change has " + change.begin()->first + ")");
  GateResult gate;
  gate.title = "the change against its base, measured interleaved";
  gate.comparison = compare(base, change, options);
  if (const std::string diff = machine_difference(base_machine, change_machine, false);
      !diff.empty())
    gate.note = "note: the two sides ran on different machines (" + diff +
                "): a base must be measured beside its change";
  if (!o.repeat_base.empty()) {
    const Samples again_base = floor_fraction_samples(read_benchmarks(o.repeat_base, nullptr));
    const Samples again_change = floor_fraction_samples(read_benchmarks(o.repeat_change, nullptr));
    Samples keep_base, keep_change;  // the repetition measures only what the first found SLOWER
    for (const std::string& key : gate.comparison.slower_keys()) {
      if (again_base.count(key)) keep_base[key] = again_base.at(key);
      if (again_change.count(key)) keep_change[key] = again_change.at(key);
    }
    gate.comparison = confirm(gate.comparison, compare(keep_base, keep_change, options));
  }
  const fs::path out(o.out_dir);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw Error(o.out_dir + ": cannot create: " + ec.message());
  json j = to_json(gate.comparison);
  j["note"] = gate.note;
  write_file(out / "compare.json", j.dump(1) + "\n");
  const std::string md = "# mlarope compare\n\n" + comparison_markdown(gate.comparison) +
                         (gate.note.empty() ? "" : "\n" + gate.note + "\n");
  write_file(out / "summary.md", md);
  harness::write_junit((out / "junit.xml").string(),
                       {junit_suite(gate.comparison, "mlarope compare")});
  if (!o.slower_keys.empty()) {
    std::string keys;
    for (const std::string& key : gate.comparison.slower_keys()) keys += key + "\n";
    write_file(o.slower_keys, keys);
  }
  append_step_summary(md);
  std::cout << md;
  return gate.exit_status();
}

}  // namespace mlarope::reports
