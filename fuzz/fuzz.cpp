// SPDX-License-Identifier: Apache-2.0
// The fuzz loop: workers draw case indices from a shared counter, so the cases of a run do not
// depend on the number of workers; each worker keeps its own stats, merged at the end.
#include "fuzz/fuzz.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <ostream>
#include <thread>

#include "backends/case_run.h"
#include "checks/yarn_check.h"
#include "fuzz/broken_backends.h"
#include "fuzz/failure.h"
#include "fuzz/generators.h"
#include "mlarope/error.h"

namespace mlarope::harness {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::uint64_t case_seed(std::uint64_t seed, std::int64_t index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(index) + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {

// "IN/OUT/TABLE" (each half, interleaved or *) into the generator's fixed layouts.
void set_layouts(props::GenOptions& gen, const std::string& layouts) {
  if (layouts.empty()) return;
  std::vector<std::string> parts;
  std::string::size_type start = 0, slash;
  while ((slash = layouts.find('/', start)) != std::string::npos) {
    parts.push_back(layouts.substr(start, slash - start));
    start = slash + 1;
  }
  parts.push_back(layouts.substr(start));
  if (parts.size() != 3)
    throw Error("layouts '" + layouts + "': expected IN/OUT/TABLE, each half, interleaved or *");
  std::optional<PairLayout>* slots[] = {&gen.in_layout, &gen.out_layout, &gen.table_layout};
  for (int i = 0; i < 3; ++i)
    if (parts[i] != "*") *slots[i] = parse_pair_layout(parts[i], "layouts");
}

std::string layout_triple(const props::CaseSpec& s) {
  return std::string(to_string(s.in_layout)) + "/" + std::string(to_string(s.out_layout)) + "/" +
         std::string(to_string(s.table_layout));
}

void count_case(FuzzStats& st, const props::CaseSpec& s, const CheckReport& report) {
  ++st.cases;
  st.counts["op"][std::string(to_string(s.op))]++;
  st.counts["layout"][std::string(to_string(s.layout))]++;
  st.counts["dtype"][std::string(to_string(s.dtype))]++;
  st.counts["table_dtype"][std::string(to_string(s.table_dtype))]++;
  st.counts["triple"][layout_triple(s)]++;
  st.counts["cp_size"][std::to_string(s.cp_size)]++;
  st.counts["values"][std::string(to_string(s.values))]++;
  st.counts["table"][std::string(to_string(s.table_kind))]++;
  st.counts["in_place"][s.in_place ? "true" : "false"]++;
  // The joint coverage matrix: op;layout;dtype;triple;cp_size.
  st.counts["matrix"][std::string(to_string(s.op)) + ";" + std::string(to_string(s.layout)) + ";" +
                      std::string(to_string(s.dtype)) + ";" + layout_triple(s) + ";" +
                      std::to_string(s.cp_size)]++;
  const std::string combination =
      std::string(to_string(s.op)) + " " + std::string(to_string(s.layout)) + " " +
      std::string(to_string(s.dtype)) + " " + layout_triple(s) + (s.inverse ? " inverse" : "") +
      (s.in_place ? " in place" : "") + (s.cp_size > 1 ? " cp" : "");
  st.combinations[combination][report.unsupported.empty() ? 0 : 1]++;
  if (!report.unsupported.empty()) st.unsupported[report.unsupported]++;
  for (const CheckResult& r : report.results)
    st.checks[std::string(to_string(r.check))][int(r.outcome)]++;
  st.ulps[std::string(to_string(s.dtype))].merge(report.histogram);
  if (report.tolerance_fraction >= 0)
    st.fractions[std::string(to_string(s.op)) + "/" + std::string(to_string(s.dtype))].add(
        report.tolerance_fraction);
  for (int e = 0; e < kEdgeValueCount; ++e)
    if (report.edges[static_cast<std::size_t>(e)] > 0)
      st.counts["edge_values"][std::string(to_string(static_cast<EdgeValue>(e)))]++;
}

// The counts of a yarn_tables case (its table dtype is its dtype; no token layout).
void count_yarn_case(FuzzStats& st, const YarnCase& c, const CheckReport& report) {
  ++st.cases;
  const std::string dtype(to_string(c.dtype));
  st.counts["op"]["yarn_tables"]++;
  st.counts["dtype"][dtype]++;
  st.counts["table_dtype"][dtype]++;
  st.counts["yarn_layout"][std::string(to_string(c.table_layout))]++;
  st.counts["yarn_scaling"][c.params.scaling_factor > 1 ? "scaled" : "plain"]++;
  st.combinations["yarn_tables " + dtype + " " + std::string(to_string(c.table_layout))]
                 [report.unsupported.empty() ? 0 : 1]++;
  if (!report.unsupported.empty()) st.unsupported[report.unsupported]++;
  for (const CheckResult& r : report.results)
    st.checks[std::string(to_string(r.check))][int(r.outcome)]++;
  st.ulps[dtype].merge(report.histogram);
  if (report.tolerance_fraction >= 0)
    st.fractions["yarn_tables/" + dtype].add(report.tolerance_fraction);
}

// Whether case `index` of a run is a yarn_tables case: one op's share when drawn among `ops`.
bool is_yarn_case(const FuzzOptions& o, bool draw_yarn, std::uint64_t seed, std::size_t ops) {
  if (o.yarn_only) return true;
  return draw_yarn && case_seed(seed ^ 0x5941524E5441424Cull, 0) % (ops + 1) == 0;
}

// Everything one worker needs.
struct Worker {
  const FuzzOptions& options;
  Backend backend;  // NOTE: one per worker: a backend's stream is not shared between threads
  const props::GenOptions& gen;
  std::atomic<std::int64_t>& next;
  std::atomic<std::int64_t>& done;
  std::atomic<std::int64_t>& failing;
  std::atomic<std::int64_t>& dirs_written;
  Clock::time_point deadline;
  bool timed;
  bool draw_yarn;
  FuzzStats stats;

  std::string variant;  // the variant this worker's backend runs now ("" without variants)

  // failures/case_NNNNNN, or with variants failures/case_NNNNNN-VARIANT (the variant's name
  // kept to letters, digits and "=._", so that every variant of a case has its own directory).
  std::string failure_dir_name(std::int64_t index) const {
    char name[64];
    std::snprintf(name, sizeof name, "case_%06lld", static_cast<long long>(index));
    std::string dir = name;
    if (!variant.empty()) {
      dir += '-';
      for (char ch : variant)
        dir += std::isalnum(static_cast<unsigned char>(ch)) || ch == '=' || ch == '.' ? ch : '_';
    }
    return (fs::path("failures") / dir).string();
  }

  // The failure's variant, counted, and written beside its case so that a replay selects it.
  void note_variant(FuzzFailure& f) {
    if (variant.empty()) return;
    f.variant = variant;
    f.description = "variant " + variant + ": " + f.description;
    ++stats.counts["variant_failing"][variant];
    if (f.dir.empty()) return;
    std::ofstream file(options.out / f.dir / "variant.json");
    file << nlohmann::json{{"variant", variant}}.dump() << "\n";
  }

  void yarn_case(std::int64_t index, std::uint64_t seed) {
    const YarnCase c = props::random_yarn_case(seed, options.size);
    CheckReport report;
    try {
      report = check_yarn(c, backend);
    } catch (const Error& e) {
      CheckResult invalid;
      invalid.outcome = Outcome::fail;
      invalid.message = std::string("the generated case is invalid: ") + e.what();
      report.results.push_back(invalid);
    }
    if (backend.take_model_stats)
      for (const ModelLaunchStats& s : backend.take_model_stats()) stats.model[s.kernel].add(s);
    count_yarn_case(stats, c, report);
    if (report.ok()) return;
    ++stats.failing_cases;
    ++failing;
    FuzzFailure f{index, seed, describe(c), "", {}, ""};
    for (const CheckResult* r : report.failures())
      f.checks.emplace_back(std::string(to_string(r->check)), r->message);
    if (dirs_written++ < options.max_failure_dirs) {
      f.dir = failure_dir_name(index);
      try {
        props::write_yarn_failure(options.out / f.dir, c, report, backend.name);
      } catch (const std::exception& e) {
        f.checks.emplace_back("write",
                              std::string("could not write the case directory: ") + e.what());
        f.dir.clear();
      }
    }
    note_variant(f);
    stats.failures.push_back(std::move(f));
  }

  void record_failure(std::int64_t index, std::uint64_t seed, const props::CaseSpec& spec,
                      const Case& c, const CheckOptions& check_options, const CheckReport& report) {
    ++stats.failing_cases;
    ++failing;
    FuzzFailure f{index, seed, props::describe(spec), "", {}, ""};
    for (const CheckResult* r : report.failures())
      f.checks.emplace_back(std::string(to_string(r->check)), r->message);
    if (dirs_written++ < options.max_failure_dirs) {
      f.dir = failure_dir_name(index);
      try {
        props::write_failure(options.out / f.dir, spec, c, check_options, report, backend.name);
      } catch (const std::exception& e) {
        f.checks.emplace_back("write",
                              std::string("could not write the case directory: ") + e.what());
        f.dir.clear();
      }
    }
    note_variant(f);
    stats.failures.push_back(std::move(f));
  }

  // Case `index` once, or once per variant.
  void one_case(std::int64_t index) {
    if (options.variants.empty()) return one_run(index);
    for (const std::string& v : options.variants) {
      variant = v;
      backend.select_variant(v);
      ++stats.counts["variant"][v];
      one_run(index);
    }
  }

  void one_run(std::int64_t index) {
    const std::uint64_t seed = case_seed(options.seed, index);
    if (is_yarn_case(options, draw_yarn, seed, gen.ops.size())) return yarn_case(index, seed);
    const props::CaseSpec spec = props::random_spec(seed, options.size, gen);
    const Case c = props::materialize(spec);
    const CheckOptions check_options = props::check_options(spec);
    CheckReport report;
    try {
      report = run_checks(c, backend, check_options);
    } catch (const Error& e) {
      CheckResult invalid;
      invalid.outcome = Outcome::fail;
      invalid.message = std::string("the generated case is invalid: ") + e.what();
      report.results.push_back(invalid);
    }
    if (backend.take_model_stats)
      for (const ModelLaunchStats& s : backend.take_model_stats()) stats.model[s.kernel].add(s);
    count_case(stats, spec, report);
    if (!report.ok()) record_failure(index, seed, spec, c, check_options, report);
  }

  void run() {
    for (;;) {
      if (timed && Clock::now() >= deadline) return;
      const std::int64_t local = next++;
      if (options.cases > 0 && local >= options.cases) return;
      one_case(options.shard.index +
               options.shard.count * local);  // this shard's share of the stream
      ++done;
    }
  }
};

std::vector<Op> all_ops() {
  return {Op::rope, Op::rope_backward, Op::kv_split, Op::kv_split_backward};
}

void show_progress(std::ostream& out, bool tty, std::int64_t cases, std::int64_t failures,
                   double seconds) {
  char line[160];
  std::snprintf(line, sizeof line, "%lld cases, %.0f cases/s, %lld failures, %.1f s",
                static_cast<long long>(cases), seconds > 0 ? cases / seconds : 0.0,
                static_cast<long long>(failures), seconds);
  if (tty) out << "\r" << line << "   " << std::flush;
  else out << line << std::endl;
}

}  // namespace

FuzzStats run_fuzz(const FuzzOptions& o, std::ostream& progress, bool tty) {
  if (o.jobs < 1 || o.jobs > 256)
    throw Error("--jobs " + std::to_string(o.jobs) + ": expected 1..256");
  if (o.size < 0) throw Error("--size " + std::to_string(o.size) + ": expected >= 0");
  if (!o.make_backend)
    props::resolve_backend(o.backend);  // an unknown name fails before anything is written
  for (const std::string& v : o.variants)
    if (v.empty()) throw Error("variants: a variant's name is empty");
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec || !fs::is_directory(o.out))
    throw Error("--out " + o.out.string() + ": cannot create the directory");
  fs::remove_all(o.out / "failures", ec);  // the failures of an earlier run in the same place
  FuzzOptions options = o;
  if (options.ops.empty()) options.ops = all_ops();
  const bool timed = options.seconds > 0 || options.cases <= 0;
  if (timed && options.seconds <= 0) options.seconds = 60;
  props::GenOptions gen;
  gen.ops = options.ops;
  for (auto* list : {&options.dtypes, &options.table_dtypes}) {  // each dtype once, in enum order
    std::sort(list->begin(), list->end());
    list->erase(std::unique(list->begin(), list->end()), list->end());
  }
  if (!options.dtypes.empty()) gen.dtypes = options.dtypes;
  if (!options.table_dtypes.empty()) gen.table_dtypes = options.table_dtypes;
  gen.in_place = options.in_place;
  gen.position_ids = options.position_ids;
  gen.seq_offsets = options.seq_offsets;
  gen.packed = options.packed;
  gen.power_of_two_dims = options.power_of_two_dims;
  set_layouts(gen, options.layouts);
  std::atomic<std::int64_t> next{0}, done{0}, failing{0}, dirs{0};
  const Clock::time_point start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(options.seconds));
  std::vector<Worker> workers;
  workers.reserve(static_cast<std::size_t>(options.jobs));  // 1..256, checked above
  for (int j = 0; j < options.jobs; ++j)
    workers.push_back(Worker{options,
                             options.make_backend ? options.make_backend()
                                                  : props::resolve_backend(options.backend),
                             gen,
                             next,
                             done,
                             failing,
                             dirs,
                             deadline,
                             timed,
                             false,
                             {},
                             ""});
  if (!options.variants.empty() && !workers.front().backend.select_variant)
    throw Error("variants: backend " + options.backend + " cannot select a variant");
  for (Worker& w : workers)
    w.draw_yarn = options.yarn && static_cast<bool>(workers.front().backend.yarn_tables);
  options.yarn = workers.front().draw_yarn;  // what fuzz.json names as drawn
  std::vector<std::thread> threads;
  threads.reserve(workers.size());
  for (Worker& w : workers) threads.emplace_back([&w] { w.run(); });
  const double period = tty ? 0.25 : 5.0;
  auto last = start;
  while (done < (options.cases > 0 ? options.cases : INT64_MAX) &&
         (!timed || Clock::now() < deadline)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (std::chrono::duration<double>(Clock::now() - last).count() < period) continue;
    last = Clock::now();
    show_progress(progress, tty, done, failing,
                  std::chrono::duration<double>(last - start).count());
  }
  for (std::thread& t : threads) t.join();
  FuzzStats stats;
  for (const Worker& w : workers) stats.merge(w.stats);
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (tty) {
    show_progress(progress, tty, stats.cases, stats.failing_cases, stats.seconds);
    progress << "\n";
  }
  std::ofstream json(options.out / "fuzz.json");
  json << to_json(stats, options).dump(1) << "\n";
  if (!json) throw Error((options.out / "fuzz.json").string() + ": cannot write");
  write_junit((options.out / "junit.xml").string(), {junit_suite(stats, options)});
  return stats;
}

}  // namespace mlarope::harness
