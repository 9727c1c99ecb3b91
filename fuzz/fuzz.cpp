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
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <thread>
#include <variant>

#include "backends/case_run.h"
#include "checks/yarn_check.h"
#include "fuzz/broken_backends.h"
#include "fuzz/failure.h"
#include "fuzz/generators.h"
#include "fuzz/steering.h"
#include "mlarope/error.h"
#include "mlarope/op_schema.h"

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

// Where a case's table rows come from (docs/semantics.md §2): "per_entry" for SBHD batch
// entries offset apart (each entry its own rows, as per-entry position ids give), else the
// THD kinds, else "positions" (the token's position, CP-mapped).
std::string rows_kind(const props::CaseSpec& s) {
  if (s.layout == TokenLayout::sbhd)
    return s.seq_offsets && s.batch >= 2 && s.seq >= 1 ? "per_entry" : "positions";
  if (s.position_ids) return "position_ids";
  if (s.freq_mode == FreqMode::packed) return "packed";
  return s.seq_offsets ? "offsets" : "positions";
}

// Head counts as kernels that take heads in tiles see them: two or more split into a q and a
// k of different counts (grouped-query, as adapters map them), over 32 need a second program
// of 1024 lanes at emb_dim 64.
std::string heads_kind(const props::CaseSpec& s) {
  if (s.heads <= 2) return std::to_string(s.heads);
  return s.heads <= 32 ? "3-32" : "over 32";
}

// Rope calls whose head holds more than the rope slice: a kernel of a leading rotary slice
// (rotary_dim < head_dim) sees them as partial rotary.
std::string rotary_kind(const props::CaseSpec& s) { return s.nope_dim > 0 ? "partial" : "full"; }

bool is_rope(const props::CaseSpec& s) { return s.op == Op::rope || s.op == Op::rope_backward; }

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
  st.counts["rows"][rows_kind(s)]++;
  st.counts["heads"][heads_kind(s)]++;
  if (is_rope(s)) st.counts["rotary"][rotary_kind(s)]++;
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
  else {  // the backend took the call
    st.counts["reached"][std::string(to_string(s.op))]++;
    st.counts["rows_reached"][rows_kind(s)]++;
    st.counts["heads_reached"][heads_kind(s)]++;
    if (is_rope(s)) st.counts["rotary_reached"][rotary_kind(s)]++;
  }
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
  else st.counts["reached"]["yarn_tables"]++;
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

// The result of a case the reference rejected: a generator's bug, a failure of the case.
CheckResult invalid_case(const Error& e) {
  CheckResult invalid;
  invalid.outcome = Outcome::fail;
  invalid.message = std::string("the generated case is invalid: ") + e.what();
  return invalid;
}

// What the host backend's GPU model measured of the case's launches.
void count_model(FuzzStats& st, const Backend& backend) {
  if (backend.take_model_stats)
    for (const ModelLaunchStats& s : backend.take_model_stats()) st.model[s.kernel].add(s);
}

FuzzFailure failure_of(std::int64_t index, std::uint64_t seed, std::string description,
                       const CheckReport& report) {
  FuzzFailure f{index, seed, std::move(description), "", {}, ""};
  for (const CheckResult* r : report.failures())
    f.checks.emplace_back(std::string(to_string(r->check)), r->message);
  return f;
}

// A case run once: its counts, and (when it failed) what writes its directory.
struct CaseRun {
  FuzzStats stats;                                 // this case alone
  std::function<void(const fs::path& dir)> write;  // empty when the case passed
};

// What every worker shares: the options, the generator, the run's counters and its end.
struct Run {
  Run(const FuzzOptions& o, const props::GenOptions& g) : options(o), gen(g) {}
  const FuzzOptions& options;
  const props::GenOptions& gen;
  Steering steering;  // learned before the workers start (inactive: `gen` for every case)
  bool draw_yarn = false;
  std::atomic<std::int64_t> next{0}, done{0}, failing{0}, dirs_written{0};
  std::atomic<int> working{0};  // worker threads not yet finished
  Clock::time_point deadline;
  bool timed = false;
  std::mutex pending_mutex;
  std::vector<std::int64_t> pending;    // cases to run before `next`: left by an interrupted run
  std::vector<std::int64_t> abandoned;  // cases under way when a signal ended this one

  bool interrupted() const {
    return options.interrupt != nullptr && options.interrupt->load() != 0;
  }
  // The next of this shard's cases to run, or -1 when the budget is spent.
  std::int64_t take() {
    {
      std::lock_guard<std::mutex> lock(pending_mutex);
      if (!pending.empty()) {
        const std::int64_t local = pending.back();
        pending.pop_back();
        return local;
      }
    }
    const std::int64_t local = next++;
    return options.cases > 0 && local >= options.cases ? -1 : local;
  }
  // The options case `seed` is drawn from: steered, or (1 in 8, and unsteered runs) the full.
  const props::GenOptions& gen_for(std::uint64_t seed) const {
    return draws_steered(steering, seed) ? steering.narrowed : gen;
  }
  std::int64_t global_index(std::int64_t local) const {  // this shard's share of the stream
    return options.shard.index + options.shard.count * local;
  }
};

// Case `index` on `backend`, in the variant the backend runs now ("" without variants).
CaseRun run_case_once(const Run& run, const Backend& backend, std::int64_t index) {
  const FuzzOptions& options = run.options;
  const std::uint64_t seed = case_seed(options.seed, index);
  CaseRun out;
  CheckReport report;
  if (is_yarn_case(options, run.draw_yarn, seed, run.gen.ops.size())) {
    const YarnCase c = props::random_yarn_case(seed, options.size);
    try {
      report = check_yarn(c, backend);
    } catch (const Error& e) {
      report.results.push_back(invalid_case(e));
    }
    count_model(out.stats, backend);
    count_yarn_case(out.stats, c, report);
    if (report.ok()) return out;
    out.stats.failures.push_back(failure_of(index, seed, describe(c), report));
    out.write = [c, report, name = backend.name](const fs::path& dir) {
      props::write_yarn_failure(dir, c, report, name);
    };
  } else {
    const props::CaseSpec spec = props::random_spec(seed, options.size, run.gen_for(seed));
    Case c = props::materialize(spec);
    const CheckOptions check_options = props::check_options(spec);
    try {
      report = run_checks(c, backend, check_options);
    } catch (const Error& e) {
      report.results.push_back(invalid_case(e));
    }
    count_model(out.stats, backend);
    count_case(out.stats, spec, report);
    if (report.ok()) return out;
    out.stats.failures.push_back(failure_of(index, seed, props::describe(spec), report));
    out.write = [spec, c = std::move(c), check_options, report,
                 name = backend.name](const fs::path& dir) {
      props::write_failure(dir, spec, c, check_options, report, name);
    };
  }
  ++out.stats.failing_cases;
  return out;
}

// A case whose worker process died or overran: a failing case of the check "crash" or
// "timeout", its directory written here from the case's seed with the worker's stderr beside it.
CaseRun dead_case(const Run& run, std::int64_t index, const WorkerDeath& death) {
  const FuzzOptions& options = run.options;
  const std::uint64_t seed = case_seed(options.seed, index);
  const std::string check = death.timed_out ? "timeout" : "crash";
  const std::string message = "the backend's worker process " + death.describe();
  CheckReport report;
  CaseRun out;
  std::string description;
  std::function<void(const fs::path&)> write_case;
  const std::string note =
      check + ": " + message + (death.stderr_tail.empty() ? "" : "\nits stderr: worker_stderr.txt");
  if (is_yarn_case(options, run.draw_yarn, seed, run.gen.ops.size())) {
    const YarnCase c = props::random_yarn_case(seed, options.size);
    count_yarn_case(out.stats, c, report);
    description = describe(c);
    write_case = [c, report, note, name = options.backend](const fs::path& dir) {
      props::write_yarn_failure(dir, c, report, name, note);
    };
  } else {
    const props::CaseSpec spec = props::random_spec(seed, options.size, run.gen_for(seed));
    count_case(out.stats, spec, report);
    description = props::describe(spec);
    write_case = [spec, report, note, name = options.backend](const fs::path& dir) {
      props::write_failure(dir, spec, props::materialize(spec), props::check_options(spec), report,
                           name, note);
    };
  }
  out.stats.checks[check][1]++;
  out.stats.failing_cases = 1;
  FuzzFailure f{index, seed, description, "", {{check, message}}, ""};
  out.stats.failures.push_back(std::move(f));
  out.write = [write_case, stderr_tail = death.stderr_tail](const fs::path& dir) {
    write_case(dir);
    if (stderr_tail.empty()) return;
    std::ofstream file(dir / "worker_stderr.txt");
    file << stderr_tail;
  };
  return out;
}

// Everything one worker thread needs: its backend in this process, or the worker process that
// runs its cases.
struct Worker {
  Run& run;
  const FuzzOptions& options;
  std::optional<Backend> backend;          // in process
  std::unique_ptr<WorkerProcess> process;  // isolated: made again after a death
  FuzzStats stats;
  std::string variant;  // the variant this worker's backend runs now ("" without variants)
  std::exception_ptr error;

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

  // Count a case's run; a failing one gets its directory (up to max_failure_dirs) through
  // `write`, which returns "" or why it could not.
  void absorb(FuzzStats one, std::int64_t index,
              const std::function<std::string(const std::string& dir)>& write) {
    if (!one.failures.empty()) {
      ++run.failing;
      FuzzFailure& f = one.failures.front();
      if (run.dirs_written++ < options.max_failure_dirs) {
        f.dir = failure_dir_name(index);
        const std::string why = write(f.dir);
        if (!why.empty()) {
          f.checks.emplace_back("write", "could not write the case directory: " + why);
          f.dir.clear();
        }
      }
      note_variant(f);
    }
    stats.merge(one);
  }

  // What writes `r`'s directory from this process: "" or why it could not.
  std::function<std::string(const std::string&)> writer(const CaseRun& r) const {
    return [this, &r](const std::string& dir) -> std::string {
      try {
        r.write(options.out / dir);
        return "";
      } catch (const std::exception& e) {
        return e.what();
      }
    };
  }

  // Case `index` in this process.
  void run_in_process(std::int64_t index) {
    CaseRun r = run_case_once(run, *backend, index);
    absorb(std::move(r.stats), index, writer(r));
  }

  // Case `index` in the worker process; false when a signal ended it before it finished.
  bool run_isolated(std::int64_t index) {
    if (!process) process = start_worker_process(run);
    const nlohmann::json request = {{"run", index}, {"variant", variant}};
    auto reply = process->request(request.dump(), options.interrupt);
    if (auto* death = std::get_if<WorkerDeath>(&reply)) {
      process.reset();
      if (death->interrupted) return false;
      // Said where the user looks, as it would be in process (a sanitizer's report, say).
      std::cerr << "mlarope fuzz: case #" << index << ": the backend's worker process "
                << death->describe() << "; a new one takes the next case"
                << (death->stderr_tail.empty() ? "\n" : "; its stderr:\n" + death->stderr_tail)
                << std::flush;
      CaseRun r = dead_case(run, index, *death);
      absorb(std::move(r.stats), index, writer(r));
      return true;
    }
    FuzzStats one = stats_from_json(nlohmann::json::parse(std::get<std::string>(reply)));
    absorb(std::move(one), index, [&](const std::string& dir) -> std::string {
      const auto written =
          process->request(nlohmann::json{{"write", (options.out / dir).string()}}.dump());
      if (const auto* d = std::get_if<WorkerDeath>(&written)) {
        process.reset();
        return "the worker process " + d->describe() + " writing it";
      }
      return std::get<std::string>(written);
    });
    return true;
  }

  // Case `index` once, or once per variant; false when a signal ended it.
  bool one_case(std::int64_t index) {
    const std::vector<std::string> one{""};
    for (const std::string& v : options.variants.empty() ? one : options.variants) {
      if (!v.empty()) ++stats.counts["variant"][v];
      variant = v;
      if (process || !backend) {
        if (!run_isolated(index)) return false;
        continue;
      }
      if (!v.empty()) backend->select_variant(v);
      run_in_process(index);
    }
    return true;
  }

  void work() {
    const ForkGuard guard;  // its forks wait for the other workers' threads to be waiting
    struct Finished {
      std::atomic<int>& working;
      ~Finished() { --working; }
    } finished{run.working};
    try {
      for (;;) {
        if (run.interrupted() || (run.timed && Clock::now() >= run.deadline)) return;
        const std::int64_t local = run.take();
        if (local < 0) return;
        if (!one_case(run.global_index(local))) {
          std::lock_guard<std::mutex> lock(run.pending_mutex);
          run.abandoned.push_back(local);
          return;
        }
        ++run.done;
      }
    } catch (...) {
      error = std::current_exception();
    }
  }

  static std::unique_ptr<WorkerProcess> start_worker_process(const Run& run);
};

Backend make_backend(const FuzzOptions& o) {
  return o.make_backend ? o.make_backend() : props::resolve_backend(o.backend);
}

// The worker process's side: the backend, watched, and the requests it serves: "describe"
// (what the backend has), "run" (a case in a variant; the reply is the case's fuzz.json) and
// "write" (the last case's failure directory; the reply is "" or why it could not).
std::unique_ptr<WorkerProcess> Worker::start_worker_process(const Run& run) {
  auto start = [&run](CallWatch& watch) -> WorkerProcess::Serve {
    auto backend = std::make_shared<Backend>(watched(make_backend(run.options), watch));
    auto last = std::make_shared<CaseRun>();
    return [&run, backend, last](const std::string& text) -> std::string {
      const nlohmann::json request = nlohmann::json::parse(text);
      if (request.contains("steer"))
        return to_json(learn_steering(run.gen, *backend, run.options.seed, run.options.size))
            .dump();
      if (request.contains("describe"))
        return nlohmann::json{{"yarn_tables", static_cast<bool>(backend->yarn_tables)},
                              {"select_variant", static_cast<bool>(backend->select_variant)}}
            .dump();
      if (request.contains("write")) {
        try {
          if (last->write) last->write(request.at("write").get<std::string>());
          return "";
        } catch (const std::exception& e) {
          return e.what();
        }
      }
      const std::string variant = request.value("variant", "");
      if (!variant.empty()) backend->select_variant(variant);
      *last = run_case_once(run, *backend, request.at("run").get<std::int64_t>());
      return to_json(last->stats, run.options).dump();
    };
  };
  return std::make_unique<WorkerProcess>(start, run.options.call_limit, run.options.fork_hooks);
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

// The interrupted run in `out` to resume, if its arguments are these; an error if they are
// not (and `fresh` is not set); nothing when there is none.
std::optional<FuzzStats> interrupted_run(const FuzzOptions& o, const nlohmann::json& arguments,
                                         std::ostream& progress) {
  const fs::path file = o.out / "fuzz.json";
  if (o.fresh || !fs::exists(file)) return std::nullopt;
  nlohmann::json j;
  try {
    std::ifstream in(file);
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // not a record this run could resume: overwritten as before
  }
  if (j.value("interrupted", std::string()).empty()) return std::nullopt;
  if (j.value("arguments", nlohmann::json()) != arguments)
    throw Error("--out " + o.out.string() + " holds a run interrupted by " +
                j.value("interrupted", std::string()) +
                " with other arguments (fuzz.json: \"arguments\"): run the same command to resume "
                "it, or add --fresh to start over there");
  FuzzStats s = stats_from_json(j);
  progress << "mlarope fuzz: resuming the run interrupted by " << s.interrupted << " in "
           << o.out.string() << ": " << s.cases << " cases done in " << s.seconds << " s\n";
  return s;
}

// Steering's warm-up (fuzz/steering.h), where the backend is: here, or in the first worker
// process, which is then replaced so that every worker is forked knowing what was learned.
void learn(Run& run, Worker& first, std::ostream& progress) {
  if (first.backend) {
    run.steering = learn_steering(run.gen, *first.backend, run.options.seed, run.options.size);
  } else {
    const auto reply = first.process->request(R"({"steer": true})", run.options.interrupt);
    if (const auto* d = std::get_if<WorkerDeath>(&reply))
      throw Error("backend " + run.options.backend + ": the worker process " + d->describe() +
                  " while steering (--no-steer runs without)");
    run.steering = steering_from_json(nlohmann::json::parse(std::get<std::string>(reply)), run.gen);
    first.process.reset();
  }
  if (run.steering.active) progress << "mlarope fuzz: steering: " << describe(run.steering) << "\n";
}

}  // namespace

bool isolated(const FuzzOptions& o) {
  if (o.isolation != FuzzOptions::Isolation::automatic)
    return o.isolation == FuzzOptions::Isolation::process;
  return static_cast<bool>(o.make_backend) || o.backend.rfind("plugin:", 0) == 0;
}

nlohmann::json run_arguments(const FuzzOptions& o) {
  nlohmann::json j = {{"backend", o.backend},
                      {"seed", o.seed},
                      {"size", o.size},
                      {"seconds", o.seconds},
                      {"cases", o.cases},
                      {"yarn", o.yarn},
                      {"yarn_only", o.yarn_only},
                      {"in_place", o.in_place},
                      {"layouts", o.layouts},
                      {"position_ids", o.position_ids},
                      {"seq_offsets", o.seq_offsets},
                      {"packed", o.packed},
                      {"power_of_two_dims", o.power_of_two_dims},
                      {"variants", o.variants},
                      {"cp_sizes", o.cp_sizes},
                      {"steer", o.steer},
                      {"shard", {o.shard.index, o.shard.count}}};
  nlohmann::json tokens = nlohmann::json::array();
  for (TokenLayout t : o.tokens) tokens.push_back(to_string(t));
  j["tokens"] = tokens;
  for (const auto& [key, list] :
       {std::pair<const char*, const std::vector<DType>*>{"dtypes", &o.dtypes},
        {"table_dtypes", &o.table_dtypes}}) {
    nlohmann::json a = nlohmann::json::array();
    for (DType d : *list) a.push_back(to_string(d));
    j[key] = a;
  }
  nlohmann::json ops = nlohmann::json::array();
  for (Op op : o.ops) ops.push_back(to_string(op));
  j["ops"] = ops;
  return j;
}

FuzzStats run_fuzz(const FuzzOptions& o, std::ostream& progress, bool tty) {
  if (o.jobs < 1 || o.jobs > 256)
    throw Error("--jobs " + std::to_string(o.jobs) + ": expected 1..256");
  if (o.size < 0) throw Error("--size " + std::to_string(o.size) + ": expected >= 0");
  const bool in_workers = isolated(o);
  if (!o.make_backend && !in_workers)
    props::resolve_backend(o.backend);  // an unknown name fails before anything is written
  for (const std::string& v : o.variants)
    if (v.empty()) throw Error("variants: a variant's name is empty");
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec || !fs::is_directory(o.out))
    throw Error("--out " + o.out.string() + ": cannot create the directory");
  FuzzOptions options = o;
  if (options.ops.empty()) options.ops = all_ops();
  for (auto* list : {&options.dtypes, &options.table_dtypes}) {  // each dtype once, in enum order
    std::sort(list->begin(), list->end());
    list->erase(std::unique(list->begin(), list->end()), list->end());
  }
  const nlohmann::json arguments = run_arguments(options);
  std::optional<FuzzStats> earlier = interrupted_run(options, arguments, progress);
  if (!earlier) fs::remove_all(o.out / "failures", ec);  // an earlier run's, in the same place
  const bool timed = options.seconds > 0 || options.cases <= 0;
  if (timed && options.seconds <= 0) options.seconds = 60;
  props::GenOptions gen;
  gen.ops = options.ops;
  if (!options.dtypes.empty()) gen.dtypes = options.dtypes;
  if (!options.table_dtypes.empty()) gen.table_dtypes = options.table_dtypes;
  gen.in_place = options.in_place;
  gen.position_ids = options.position_ids;
  gen.seq_offsets = options.seq_offsets;
  gen.packed = options.packed;
  gen.power_of_two_dims = options.power_of_two_dims;
  if (!options.tokens.empty()) gen.layouts = options.tokens;
  if (!options.cp_sizes.empty()) gen.cp_sizes = options.cp_sizes;
  set_layouts(gen, options.layouts);
  Run run(options, gen);
  const Clock::time_point start = Clock::now();
  const double left = timed ? options.seconds - (earlier ? earlier->seconds : 0.0) : 0.0;
  run.deadline = start + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(std::max(left, 0.0)));
  run.timed = timed;
  if (earlier) {
    run.next = earlier->next;
    run.pending = earlier->pending;
    run.dirs_written = static_cast<std::int64_t>(
        std::count_if(earlier->failures.begin(), earlier->failures.end(),
                      [](const FuzzFailure& f) { return !f.dir.empty(); }));
  }
  std::vector<Worker> workers;
  workers.reserve(static_cast<std::size_t>(options.jobs));  // 1..256, checked above
  for (int j = 0; j < options.jobs; ++j)
    workers.push_back(Worker{run, options, {}, {}, {}, "", {}});
  bool has_yarn = false, has_variants = false;
  if (in_workers) {  // the first worker process says what the backend has (and fails early)
    workers.front().process = Worker::start_worker_process(run);
    const auto reply = workers.front().process->request(R"({"describe": true})");
    if (const auto* d = std::get_if<WorkerDeath>(&reply))
      throw Error("backend " + options.backend + ": the worker process " + d->describe() +
                  " describing it");
    const nlohmann::json what = nlohmann::json::parse(std::get<std::string>(reply));
    has_yarn = what.value("yarn_tables", false);
    has_variants = what.value("select_variant", false);
  } else {
    for (Worker& w : workers) w.backend = make_backend(options);
    has_yarn = static_cast<bool>(workers.front().backend->yarn_tables);
    has_variants = static_cast<bool>(workers.front().backend->select_variant);
  }
  if (!options.variants.empty() && !has_variants)
    throw Error("variants: backend " + options.backend + " cannot select a variant");
  run.draw_yarn = options.yarn && has_yarn;
  options.yarn = run.draw_yarn;  // what fuzz.json names as drawn
  if (options.steer) learn(run, workers.front(), progress);
  std::vector<std::thread> threads;
  threads.reserve(workers.size());
  run.working = static_cast<int>(workers.size());
  // A finished thread waits for the others before it exits: its exit frees memory outside its
  // ForkGuard (the allocator's locks; ASan's per-thread cache), and a worker forked meanwhile
  // by another thread would inherit a lock held for good and hang in its first allocation.
  for (Worker& w : workers)
    threads.emplace_back([&w, &run] {
      w.work();
      while (run.working > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    });
  const double period = tty ? 0.25 : 5.0;
  const double before = earlier ? earlier->seconds : 0.0;
  const std::int64_t cases_before = earlier ? earlier->cases : 0;
  auto last = start;
  while (run.working > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (std::chrono::duration<double>(Clock::now() - last).count() < period) continue;
    last = Clock::now();
    const ForkGuard printing;  // no worker's fork while this thread writes
    show_progress(progress, tty, cases_before + run.done, run.failing,
                  before + std::chrono::duration<double>(last - start).count());
  }
  for (std::thread& t : threads) t.join();
  FuzzStats stats;
  if (earlier) stats = *earlier;
  for (const Worker& w : workers) stats.merge(w.stats);
  stats.seconds = before + std::chrono::duration<double>(Clock::now() - start).count();
  // Our own backends take every draw and are never probed: nothing to say of steering there.
  if (options.steer && run.steering.probes > 0) stats.steering = to_json(run.steering).dump();
  stats.interrupted.clear();
  if (earlier) ++stats.resumed;
  if (run.interrupted()) {
    stats.interrupted = signal_name(options.interrupt->load());
    stats.next = run.next;
    stats.pending = run.pending;
    stats.pending.insert(stats.pending.end(), run.abandoned.begin(), run.abandoned.end());
  }
  for (const Worker& w : workers)
    if (w.error) std::rethrow_exception(w.error);
  if (tty) {
    show_progress(progress, tty, stats.cases, stats.failing_cases, stats.seconds);
    progress << "\n";
  }
  std::ofstream json(options.out / "fuzz.json");
  nlohmann::json document = to_json(stats, options);
  document["arguments"] = arguments;
  json << document.dump(1) << "\n";
  if (!json) throw Error((options.out / "fuzz.json").string() + ": cannot write");
  write_junit((options.out / "junit.xml").string(), {junit_suite(stats, options)});
  return stats;
}

}  // namespace mlarope::harness
