// SPDX-License-Identifier: Apache-2.0
// The mlarope command-line tool: run a case file (docs/semantics.md §7) on a backend, check it with
// every check of docs/architecture.md, or fuzz a backend with random cases. Exit statuses: see
// kExitStatuses.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>

#include "backends/case_run.h"
#include "checks/checks.h"
#include "checks/compare.h"
#include "checks/tolerance.h"
#include "checks/yarn_check.h"
#include "fuzz/broken_backends.h"
#include "fuzz/fuzz.h"
#include "mlarope/error.h"
#include "mlarope/op_schema.h"
#include "mlarope/timing.h"
#include "reference.h"
#include "report_command.h"

namespace fs = std::filesystem;
using namespace mlarope;
using namespace mlarope::harness;

namespace {

// Exit statuses, in --help too.
constexpr int kExitCheckFailed = 1;   // a check or a fuzz case failed
constexpr int kExitError = 2;         // bad command line, unreadable or invalid case
constexpr int kExitOffExpected = 3;   // run: outputs off the case's expected_*.npy; report,
                                      // compare: the gate cannot decide (a key UNKNOWN)
constexpr int kExitDeviceStatus = 4;  // run, check: the call's status word is not ok
constexpr const char* kExitStatuses =
    "Exit status: 0 ok; 1 a check or fuzz case failed (a crash or a hang of an isolated backend "
    "too), or (report, compare) a benchmark is "
    "SLOWER; 2 an error (command line, case file, invalid call); 128 + N (fuzz) a signal N "
    "ended the run early (SIGHUP 129, SIGINT 130, SIGTERM 143) after writing its results; 3 "
    "(run) outputs off the case's "
    "expected_*.npy, (report, compare) the gate cannot decide (a key UNKNOWN, never a pass); 4 "
    "(run, check) the call's "
    "device status word reports invalid metadata (docs/semantics.md §5: bad cu_seqlens, a sequence "
    "length "
    "not divisible by 2 * cp_size, or a freq_row outside the table).";

// The status word of a call that ran: ok, or a line on stderr saying what is wrong and
// kExitDeviceStatus. Diagnostics (why the exit status is not 0, progress, errors) go to stderr
// in every subcommand; stdout carries the results, so it can be a pipe.
int status_exit(DeviceStatus status) {
  if (status == kStatusOk) return 0;
  std::cerr << "  device status word: " << describe_status(status)
            << ": the case's metadata is invalid (exit status " << kExitDeviceStatus << ")\n";
  return kExitDeviceStatus;
}

// One line describing a case: op, layout, dtypes, flags.
std::string describe(const Case& c) {
  const CaseConfig& k = c.config;
  std::string s = std::string(to_string(k.op)) + " " + std::string(to_string(k.layout)) + " " +
                  std::string(to_string(k.dtype)) + " (table " +
                  std::string(to_string(k.table_dtype)) +
                  "), layouts in=" + std::string(to_string(k.in_layout)) +
                  " out=" + std::string(to_string(k.out_layout)) +
                  " table=" + std::string(to_string(k.table_layout));
  if (k.inverse) s += ", inverse";
  if (k.in_place) s += ", in place";
  if (k.cp_size > 1) s += ", cp " + std::to_string(k.cp_rank) + "/" + std::to_string(k.cp_size);
  if (k.layout == TokenLayout::thd) s += ", " + std::string(to_string(k.freq_mode));
  return s;
}

// "host" when this build has it, else "reference".
std::string default_backend() {
  const auto names = backend_names();
  return std::find(names.begin(), names.end(), "host") != names.end() ? "host" : "reference";
}

std::string known_backends() {
  std::string s;
  for (const std::string& n : backend_names()) s += (s.empty() ? "" : "|") + n;
  return s + " (check and fuzz also take broken:NAME, a deliberately wrong reference)";
}

// --- run ---------------------------------------------------------------------------------------

struct RunOptions {
  std::string case_dir;
  std::string backend = "reference";
  std::string out_dir;
};

// What the host backend's GPU model measured: per launch, the grid, the sector efficiency and
// the time the timing model predicts on an H200; for the call, the predicted DRAM bytes
// against the minimum of the performance model.
void print_model_stats(const std::vector<ModelLaunchStats>& launches, std::int64_t minimum) {
  std::int64_t dram = 0;
  const DeviceProfile h200 = device_profile("h200");
  for (const ModelLaunchStats& s : launches) {
    std::cout << "  GPU model: " << s.kernel << ", grid " << s.blocks << " x " << s.threads
              << ", sector efficiency " << std::setprecision(3) << s.sector_efficiency();
    if (s.index_loads > 0)
      std::cout << ", " << s.index_loads << " index loads (THD gate and row plans)";
    if (s.model_bytes > 0)
      std::cout << ", model state " << std::setprecision(3) << s.model_bytes / 1048576.0 << " MiB";
    std::cout << "\n";
    dram += s.dram_bytes;
    if (cuda_kernel_of(s.kernel).empty()) continue;
    const TimePrediction p =
        predict_time(s, resource_of(s.kernel, built_kernel_resources()), h200, s.dram_bytes);
    std::cout << "  timing model (" << h200.name << "): " << std::setprecision(3) << p.seconds * 1e6
              << " us, " << p.occupancy.blocks_per_sm << " blocks/SM (" << p.occupancy.limit
              << "), " << p.waves << " waves, " << p.round_trips_per_block
              << " round trips a block, " << p.bytes_in_flight_per_sm / 1024
              << " KiB in flight an SM, " << p.bandwidth_drawn << " of the copy bandwidth drawn ("
              << p.bandwidth_available << " available), " << p.limit << " bound\n";
  }
  if (launches.empty() || minimum <= 0) return;
  std::cout << "  GPU model: predicted DRAM " << dram << " bytes = " << std::setprecision(3)
            << static_cast<double>(dram) / static_cast<double>(minimum) << " x the minimum ("
            << minimum << " bytes)\n"
            << std::setprecision(6);
}

// mlarope run: read, run, write, and compare with expected_<name>.npy where the case has them.
int run_command(const RunOptions& o) {
  const Case c = read_case(o.case_dir);
  const Backend backend = find_backend(o.backend);
  std::cout << o.case_dir << ": " << describe(c) << "\n";
  const auto start = std::chrono::steady_clock::now();
  CaseOutputs outputs;
  try {
    outputs = run_case(c, backend);
  } catch (const Unsupported& e) {
    throw Error("backend " + backend.name + " does not compute this case: " + e.what());
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::cout << "  backend " << backend.name << ": " << ms << " ms, device status "
            << describe_status(outputs.status) << "\n";
  if (backend.take_model_stats) print_model_stats(backend.take_model_stats(), minimum_bytes(c));
  if (!o.out_dir.empty()) write_outputs(o.out_dir, outputs);
  // The reference rounds once: within 1 ulp. Optimized backends: the tolerance model
  // (docs/architecture.md).
  const bool is_reference = backend.name == "reference";
  int worse_than_one_ulp = 0;
  std::map<std::string, npy::Array> expected_arrays;
  for (const auto& [name, array] : outputs.arrays) {
    std::cout << "  " << name << " " << shape_string(array.shape);
    if (!o.out_dir.empty()) std::cout << " -> " << (fs::path(o.out_dir) / (name + ".npy")).string();
    const fs::path expected = fs::path(o.case_dir) / ("expected_" + name + ".npy");
    if (fs::exists(expected)) {
      expected_arrays[name] = npy::read(expected);
      const Comparison cmp = compare_ulps(array, c.config.dtype, expected_arrays[name]);
      std::cout << "\n    vs " << expected.filename().string() << ": " << cmp.summary(array.shape);
      if (!cmp.same_shape || cmp.max_ulps > 1.0 || cmp.nan_mismatches) ++worse_than_one_ulp;
    }
    std::cout << "\n";
  }
  if (is_reference && worse_than_one_ulp) {
    std::cerr << "  " << worse_than_one_ulp
              << " output(s) differ from expected by more than 1 ulp\n";
    return kExitOffExpected;
  }
  if (!is_reference && expected_arrays.size() == outputs.arrays.size() &&
      !expected_arrays.empty()) {
    const ToleranceResult t = check_tolerance(c, outputs.arrays, expected_arrays);
    std::cout << "  tolerance model: " << (t.ok() ? "ok" : "VIOLATED") << ", " << t.checked
              << " elements";
    if (!t.ok()) std::cout << ", " << t.violations << " outside, first " << t.first_violation;
    std::cout << "\n";
    if (!t.ok()) {
      std::cerr << "  " << t.violations << " element(s) outside the tolerance model\n";
      return kExitOffExpected;
    }
  }
  return status_exit(outputs.status);
}

// --- report ------------------------------------------------------------------------------------

// A gate's exit status, said on stderr when it is not a pass.
int gate_exit(const char* command, int status) {
  if (status == 1)
    std::cerr << "mlarope " << command << ": a benchmark is SLOWER (exit status 1)\n";
  if (status == 3)
    std::cerr << "mlarope " << command
              << ": the gate cannot decide, a benchmark is UNKNOWN (exit status 3)\n";
  return status;
}

// The gate's settings, shared by report and compare.
void add_gate_options(CLI::App* cmd, reports::GateOptions& gate) {
  cmd->add_option("--alpha", gate.alpha,
                  "largest Holm-adjusted one-sided Mann-Whitney p that counts as a change")
      ->capture_default_str();
  cmd->add_option("--min-effect", gate.host_min_effect,
                  "smallest relative drop of the floor fraction that fails, host keys")
      ->capture_default_str();
  cmd->add_option("--gpu-min-effect", gate.gpu_min_effect,
                  "smallest relative drop that fails, keys of a CUDA backend")
      ->capture_default_str();
  cmd->add_option(
      "--key-min-effect", gate.key_min_effect,
      "KEY=FRACTION: the smallest drop for a key or key prefix (repeatable; the longest "
      "prefix wins)");
  cmd->add_option("--min-samples", gate.min_samples,
                  "repetitions a side below which a key is UNKNOWN")
      ->capture_default_str();
}

void add_report(CLI::App& app, reports::ReportOptions& report) {
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Read fuzz.json and Google Benchmark JSON files (mlarope_bench --benchmark_out=F.json) and "
      "write DIR/report.html (self-contained, inline SVG charts), DIR/summary.md, DIR/junit.xml "
      "(a test case per fuzz check and per gated key) and, with benchmarks, DIR/bmf.json (Bencher) "
      "and DIR/benchmark-action.json (github-action-benchmark, customBiggerIsBetter); print the "
      "summary and append it to $GITHUB_STEP_SUMMARY when set. With --baseline (a Google Benchmark "
      "JSON with every repetition, recorded on this machine), exit status 1 if a key is SLOWER, 3 "
      "if the gate cannot decide (UNKNOWN); a baseline of another machine is not applied.");
  cmd->add_option(
         "INPUTS", report.inputs,
         "fuzz.json, benchmark JSON and ptxas.txt files; folders `mlarope fuzz --out` wrote (their "
         "fuzz.json, or each shard-*/fuzz.json of a sharded run); quoted glob patterns")
      ->required();
  cmd->add_option("--out", report.out_dir, "output directory")->capture_default_str();
  cmd->add_option("--baseline", report.baseline,
                  "stored baseline to gate against: mlarope_bench --benchmark_repetitions=9 "
                  "--benchmark_out=FILE, on this machine")
      ->check(CLI::ExistingFile);
  cmd->add_option("--history", report.history,
                  "history folder: record this run's medians as one JSON per commit (created if "
                  "missing) and draw each op's floor fraction over the commits");
  cmd->add_option("--commit", report.commit,
                  "the commit a history entry names (default: $GITHUB_SHA, $CI_COMMIT_SHA or git "
                  "rev-parse HEAD)");
  add_gate_options(cmd, report.gate);
}

void add_compare(CLI::App& app, reports::CompareCommandOptions& compare) {
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "Compare the repetitions of a change's benchmarks with its base's (Google Benchmark JSON "
      "files, measured interleaved on one machine: ci/bench-compare.sh), key by key: median "
      "change of the floor fraction with its 95% interval, exact one-sided Mann-Whitney p (Holm "
      "over the keys), verdict SAME, FASTER, SLOWER or UNKNOWN. Writes DIR/compare.json, "
      "DIR/summary.md and DIR/junit.xml. Exit status 0 pass, 1 a key SLOWER, 3 a key UNKNOWN "
      "(never a pass). With --repeat-base and --repeat-change (the SLOWER keys measured again), "
      "a key stays SLOWER only if the repeat finds it SLOWER too.");
  cmd->add_option("--base", compare.base, "the base's benchmark JSON files")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--change", compare.change, "the change's benchmark JSON files")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--repeat-base", compare.repeat_base, "the base measured again (the SLOWER keys)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--repeat-change", compare.repeat_change,
                  "the change measured again (the SLOWER keys)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", compare.out_dir, "output directory")->capture_default_str();
  cmd->add_option("--slower-keys", compare.slower_keys,
                  "write the SLOWER keys to this file, one a line");
  add_gate_options(cmd, compare.gate);
}

// --- isolation: check and fuzz -----------------------------------------------------------------

// Where a backend runs (FuzzOptions::Isolation) and how long its calls may take there.
struct IsolationFlags {
  bool process = false, in_process = false;
  double call_timeout = 0;
  FuzzOptions::Isolation mode() const {
    if (process) return FuzzOptions::Isolation::process;
    return in_process ? FuzzOptions::Isolation::in_process : FuzzOptions::Isolation::automatic;
  }
};

void add_isolation_options(CLI::App* cmd, IsolationFlags& f) {
  CLI::Option* process = cmd->add_flag(
      "--isolate", f.process,
      "run the backend in worker processes, so that a crash, an abort or a hang is a failing "
      "case (crash, timeout) with the worker's stderr, and the run goes on: the default for "
      "plugin: backends");
  CLI::Option* in_process =
      cmd->add_flag("--in-process", f.in_process,
                    "run the backend in this process (faster; a crash ends the run): the "
                    "default for reference, host, host-fast, cuda and broken: backends");
  process->excludes(in_process);
  cmd->add_option("--call-timeout", f.call_timeout,
                  "seconds an isolated backend's call may take before it is a hang (default: "
                  "30 + 1000 x the reference's time on the case)")
      ->check(CLI::Range(0.0, 1e6));
}

// --- check -------------------------------------------------------------------------------------

struct CheckCommandOptions {
  std::string case_dir;
  std::string backend = default_backend();
  std::vector<std::string> checks;
  std::uint64_t seed = 0;
  bool seed_given = false;
  IsolationFlags isolation;
};

// The checks.json a failure directory carries, or the defaults.
CheckOptions options_in(const fs::path& dir) {
  const fs::path file = dir / "checks.json";
  if (!fs::exists(file)) return {};
  std::ifstream in(file);
  try {
    return check_options_from_json(nlohmann::json::parse(in));
  } catch (const nlohmann::json::exception& e) {
    throw Error(file.string() + ": not valid JSON: " + e.what());
  } catch (const Error& e) {
    throw Error(file.string() + ": " + e.what());
  }
}

// mlarope check: every check on one case, one line per check.
// One line per check and the counts; false (after saying so) when the backend declined the
// case, which is counted apart: a declined case is not a failure.
// kExitCheckFailed, after a line on stderr naming the failed checks.
int failed_checks(const CheckReport& report) {
  if (report.ok()) return 0;
  std::string names;
  for (const CheckResult& r : report.results)
    if (r.outcome == Outcome::fail)
      names += (names.empty() ? "" : ", ") + std::string(to_string(r.check));
  std::cerr << "  failed: " << names << "\n";
  return kExitCheckFailed;
}

bool print_report(const CheckReport& report, const Backend& backend) {
  if (!report.unsupported.empty()) {
    std::cout << "  not supported by " << backend.name << ": " << report.unsupported
              << " (no check ran)\n";
    return false;
  }
  int counts[3] = {0, 0, 0};
  for (const CheckResult& r : report.results) {
    std::cout << "  " << format_result(r) << "\n";
    ++counts[int(r.outcome)];
  }
  std::cout << "  " << counts[0] << " passed, " << counts[1] << " failed, " << counts[2]
            << " skipped\n";
  return true;
}

// mlarope check on a yarn_tables failure directory (yarn_case.json).
int check_yarn_command(const CheckCommandOptions& o, const Backend& backend) {
  const fs::path file = fs::path(o.case_dir) / "yarn_case.json";
  std::ifstream in(file);
  YarnCase c;
  try {
    c = yarn_case_from_json(nlohmann::json::parse(in));
  } catch (const nlohmann::json::exception& e) {
    throw Error(file.string() + ": not valid JSON: " + e.what());
  }
  std::cout << o.case_dir << ": " << describe(c) << "\n  backend " << backend.name << "\n";
  const CheckReport report = check_yarn(c, backend);
  if (!print_report(report, backend)) return 0;
  return failed_checks(report);
}

int check_case_command(const CheckCommandOptions& o, const Backend& backend) {
  if (fs::exists(fs::path(o.case_dir) / "yarn_case.json")) return check_yarn_command(o, backend);
  const Case c = read_case(o.case_dir);
  CheckOptions options = options_in(o.case_dir);
  if (!o.checks.empty()) {
    options.checks.clear();
    for (const std::string& name : o.checks) options.checks.push_back(parse_check(name));
  }
  if (o.seed_given) options.seed = o.seed;
  const LayoutPlan& p = options.layout;
  std::cout << o.case_dir << ": " << describe(c) << "\n  backend " << backend.name
            << "; layout head_gap " << p.head_gap << ", row_gap " << p.row_gap << ", table_gap "
            << p.table_gap << (p.misalign ? ", misaligned" : "")
            << (p.broadcast_heads ? ", broadcast heads" : "") << "; seed " << options.seed << "\n";
  const CheckReport report = run_checks(c, backend, options);
  if (!print_report(report, backend)) return 0;
  if (!report.ok()) return failed_checks(report);
  return status_exit(report.status);
}

// mlarope check: in this process, or (an isolated backend) in a worker process whose crash or
// hang is a failed check said here, with the worker's stderr.
int check_command(const CheckCommandOptions& o) {
  FuzzOptions where;
  where.backend = o.backend;
  where.isolation = o.isolation.mode();
  if (!isolated(where)) return check_case_command(o, props::resolve_backend(o.backend));
  auto start = [&o](CallWatch& watch) -> WorkerProcess::Serve {
    auto backend = std::make_shared<Backend>(watched(props::resolve_backend(o.backend), watch));
    return [&o, backend](const std::string&) {
      return std::to_string(check_case_command(o, *backend));
    };
  };
  WorkerProcess worker(start, CallLimit{o.isolation.call_timeout});
  const auto reply = worker.request("check");
  if (const auto* d = std::get_if<WorkerDeath>(&reply)) {
    const char* check = d->timed_out ? "timeout" : "crash";
    std::cout << "  " << check << ": the backend's worker process " << d->describe() << "\n";
    if (!d->stderr_tail.empty()) std::cout << "  its stderr:\n" << d->stderr_tail << "\n";
    std::cerr << "  failed: " << check << "\n";
    return kExitCheckFailed;
  }
  return std::stoi(std::get<std::string>(reply));
}

// --- fuzz --------------------------------------------------------------------------------------

struct FuzzCommandOptions {
  FuzzOptions fuzz;
  IsolationFlags isolation;
  std::optional<std::int64_t> shard_index, shard_count;
  bool shard_info = false;
  std::vector<std::string> ops, dtypes, table_dtypes, tokens;
  std::string out = "fuzz-out";
};

Op parse_op_name(const std::string& name) {
  try {
    return parse_op(name, "--ops");
  } catch (const Error&) {
    throw Error("--ops: '" + name + "' is not an op (" + op_names() + ", yarn_tables)");
  }
}

// The signal that asks a fuzz run to end early (0: none).
std::atomic<int> interrupt_signal{0};

int fuzz_command(FuzzCommandOptions o) {
  bool yarn_listed = false;
  for (const std::string& name : o.ops) {
    if (name == "yarn_tables") yarn_listed = true;
    else o.fuzz.ops.push_back(parse_op_name(name));
  }
  if (!o.ops.empty()) {  // a list names what is drawn: yarn_tables only when listed
    o.fuzz.yarn = yarn_listed;
    o.fuzz.yarn_only = yarn_listed && o.fuzz.ops.empty();
  }
  for (const std::string& name : o.dtypes) o.fuzz.dtypes.push_back(parse_dtype(name, "--dtypes"));
  for (const std::string& name : o.table_dtypes)
    o.fuzz.table_dtypes.push_back(parse_dtype(name, "--table-dtypes"));
  for (const std::string& name : o.tokens)
    o.fuzz.tokens.push_back(parse_token_layout(name, "--tokens"));
  for (std::int64_t cp : o.fuzz.cp_sizes)
    if (cp < 1 || cp > 8) throw Error("--cp-sizes " + std::to_string(cp) + ": expected 1..8");
  o.fuzz.shard = resolve_shard(o.shard_index, o.shard_count);
  if (o.shard_info) {  // for scripts (ci/fuzz-shard.sh): the shard this process would run
    std::cout << o.fuzz.shard.index << " " << o.fuzz.shard.count << " " << o.fuzz.shard.source
              << "\n";
    return 0;
  }
  o.fuzz.out =
      o.fuzz.shard.count > 1 ? fs::path(o.out) / shard_folder(o.fuzz.shard) : fs::path(o.out);
  o.fuzz.isolation = o.isolation.mode();
  o.fuzz.call_limit.seconds = o.isolation.call_timeout;
  o.fuzz.interrupt = &interrupt_signal;
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {  // a second one of a kind ends the run outright
    struct sigaction action {};
    action.sa_handler = [](int signal) { interrupt_signal.store(signal); };
    action.sa_flags = SA_RESETHAND;
    sigaction(sig, &action, nullptr);
  }
  // Progress on stderr: stdout carries the summary only, for pipes and scripts.
  const bool tty = isatty(fileno(stderr)) != 0;
  const FuzzStats stats = run_fuzz(o.fuzz, std::cerr, tty);
  FuzzOptions shown = o.fuzz;
  if (shown.ops.empty()) shown.ops = all_ops();
  std::cout << summary(stats, shown);
  if (!stats.interrupted.empty()) {
    std::cerr << "mlarope fuzz: interrupted by " << stats.interrupted << " after " << stats.cases
              << " cases (" << stats.failing_cases << " failing); "
              << (o.fuzz.out / "fuzz.json").string()
              << " written; the same command resumes the run\n";
    return 128 + interrupt_signal.load();
  }
  if (stats.failing_cases == 0) return 0;
  std::cerr << "mlarope fuzz: " << stats.failing_cases << " failing case(s), written under "
            << (o.fuzz.out / "failures").string() << "\n";
  return kExitCheckFailed;
}

void add_run(CLI::App& app, RunOptions& run) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run one case on a backend, write its outputs (out.npy, grad_t.npy, key.npy + value.npy, or "
      "grad_kv.npy + grad_k_pe.npy) in the activation dtype, and compare them with any "
      "expected_<output>.npy in the case directory (exit status 3 if the reference is more than 1 "
      "ulp "
      "away, or an optimized backend outside the tolerance model (docs/architecture.md); exit "
      "status 4 if the call's "
      "device status word reports invalid metadata).");
  cmd->add_option("CASE_DIR", run.case_dir, "case directory holding case.json")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--backend", run.backend, known_backends())->capture_default_str();
  cmd->add_option("--out", run.out_dir, "directory for the outputs (created if missing)");
}

void add_check(CLI::App& app, CheckCommandOptions& check) {
  CLI::App* cmd = app.add_subcommand(
      "check",
      "Run every check of docs/architecture.md (value, coverage, immutability, bounds, round trip, "
      "adjoint, "
      "in place, graph replay, determinism, order independence) on one case and print each result; "
      "uses the case's checks.json (layout plan, seed) when it has one. Exit status 1 if a check "
      "fails, "
      "4 if every check passed but the call's device status word reports invalid metadata.");
  cmd->add_option("CASE_DIR", check.case_dir, "case directory holding case.json")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--backend", check.backend, known_backends())->capture_default_str();
  cmd->add_option("--checks", check.checks, "only these checks (comma separated)")->delimiter(',');
  cmd->add_option_function<std::uint64_t>(
      "--seed", [&check](std::uint64_t s) { check.seed = s, check.seed_given = true; },
      "seed of the random data of adjoint and graph replay, and of the order seeds");
  add_isolation_options(cmd, check.isolation);
}

void add_fuzz(CLI::App& app, FuzzCommandOptions& fuzz) {
  CLI::App* cmd = app.add_subcommand(
      "fuzz",
      "Run random cases through every check until the budget ends (60 s when neither --seconds "
      "nor --cases is given); write DIR/fuzz.json and failing cases under DIR/failures/. Exit "
      "status 1 if a case fails. SIGTERM, SIGINT and SIGHUP end the run early with everything "
      "written (exit status 128 + the signal); the same command then resumes it.");
  FuzzOptions& f = fuzz.fuzz;
  f.backend = default_backend();
  cmd->add_option("--seconds", f.seconds, "time budget in seconds")->check(CLI::Range(0.0, 1e7));
  cmd->add_option("--cases", f.cases, "case budget")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40));
  cmd->add_option("--seed", f.seed, "seed of the run")->capture_default_str();
  cmd->add_option("--backend", f.backend, known_backends())->capture_default_str();
  cmd->add_option("--ops", fuzz.ops,
                  "ops to draw, comma separated: rope, rope_backward, kv_split, kv_split_backward, "
                  "yarn_tables "
                  "(default all; yarn_tables only where the backend has it)")
      ->delimiter(',');
  cmd->add_option("--dtypes", fuzz.dtypes, "activation dtypes to draw (f32,bf16,f16; default all)")
      ->delimiter(',');
  cmd->add_option("--table-dtypes", fuzz.table_dtypes, "table dtypes to draw (default all)")
      ->delimiter(',');
  cmd->add_flag("!--no-in-place", f.in_place,
                "draw no in-place calls (for a backend without them)");
  cmd->add_option("--layouts", f.layouts,
                  "pair layouts to draw, IN/OUT/TABLE, each half, interleaved or * "
                  "(e.g. interleaved/half/*)");
  cmd->add_option("--tokens", fuzz.tokens, "token layouts to draw (sbhd,thd; default both)")
      ->delimiter(',');
  cmd->add_option("--cp-sizes", f.cp_sizes,
                  "context-parallel sizes to draw (default 1,2,3,4,8; 1 is half the draws)")
      ->delimiter(',');
  cmd->add_flag("!--no-seq-offsets", f.seq_offsets, "draw no sequence offsets");
  cmd->add_flag("!--no-position-ids", f.position_ids, "draw no THD position ids");
  cmd->add_flag("!--no-packed", f.packed, "draw no THD packed frequency mode");
  cmd->add_flag("!--no-steer", f.steer,
                "draw every option evenly: by default the draws of a plugin or Python backend "
                "are steered to what its supports() accepted in probes before the run (7 "
                "cases in 8; the summary's steering line says what was kept)");
  cmd->add_option("--out", fuzz.out,
                  "output directory (a shard of several writes into DIR/shard-NNNN)")
      ->capture_default_str();
  cmd->add_option(
         "--shard-index", fuzz.shard_index,
         "this shard's index, 0-based (default: from SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX "
         "or GTEST_SHARD_INDEX; see docs/cluster-fuzzing.md)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option(
         "--shard-count", fuzz.shard_count,
         "number of shards (default: SLURM_ARRAY_TASK_COUNT, MLAROPE_SHARD_COUNT with "
         "JOB_COMPLETION_INDEX, or GTEST_TOTAL_SHARDS); shards run disjoint cases of one seed")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--shard-info", fuzz.shard_info,
                "print this process's shard (INDEX COUNT SOURCE) and exit");
  cmd->add_option("--size", f.size,
                  "generator size: 100 gives the default distributions, more "
                  "allows more rows per case")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--jobs", f.jobs, "worker threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--max-failure-dirs", f.max_failure_dirs,
                  "failing cases written as directories at most")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 20));
  add_isolation_options(cmd, fuzz.isolation);
  cmd->add_flag("--fresh", f.fresh,
                "start afresh where --out holds a run a signal interrupted (by default the same "
                "command resumes it, and other arguments are an error)");
}

// --- yarn --------------------------------------------------------------------------------------

struct YarnCommandOptions {
  YarnTable table;
  std::int64_t emb_dim = 0;
  std::string dtype = "f32", table_layout = "half", backend = "reference", out;
  double concentration = std::nan("");
};

// mlarope yarn: the YaRN tables of docs/semantics.md §4 as DIR/cos.npy and DIR/sin.npy, and
// DIR/yarn.json (the parameters, in case.json's "yarn" form), from the reference or the host
// backend's kernel.
int yarn_command(YarnCommandOptions o) {
  const DType dtype = parse_dtype(o.dtype, "--dtype");
  const PairLayout layout = parse_pair_layout(o.table_layout, "--table-layout");
  o.table.params.concentration_override = o.concentration;
  if (o.backend != "reference" && o.backend != "host")
    throw Error("--backend " + o.backend + ": expected reference or host");
  auto [cos, sin] = o.backend == "reference" ? yarn_arrays(o.table, o.emb_dim, dtype, layout)
                                             : std::pair<npy::Array, npy::Array>{};
  if (o.backend == "host") {  // the kernel's own tables (the same single source as CUDA's)
    cos = sin = npy::make(storage_dtype(dtype), {o.table.rows, o.emb_dim});
    YarnTablesCall call{o.table.params, o.table.offset, layout, view_of(cos, dtype),
                        view_of(sin, dtype)};
    Stream stream = Stream::host();
    yarn_tables(call, stream);
    stream.synchronize();
  }
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) throw Error("--out " + o.out + ": cannot create: " + ec.message());
  npy::write(fs::path(o.out) / "cos.npy", cos);
  npy::write(fs::path(o.out) / "sin.npy", sin);
  nlohmann::json j = {{"yarn", to_json(o.table)},
                      {"emb_dim", o.emb_dim},
                      {"table_dtype", o.dtype},
                      {"table_layout", o.table_layout},
                      {"backend", o.backend}};
  std::ofstream(fs::path(o.out) / "yarn.json") << j.dump(1) << "\n";
  std::cout << "yarn: cos.npy, sin.npy [" << o.table.rows << ", " << o.emb_dim << "] " << o.dtype
            << " (" << o.table_layout << ", positions " << o.table.offset << ".."
            << o.table.offset + o.table.rows - 1 << ", concentration "
            << reference::yarn_concentration(o.table.params) << ") from " << o.backend << " in "
            << o.out << "\n";
  return 0;
}

void add_yarn(CLI::App& app, YarnCommandOptions& y) {
  CLI::App* cmd = app.add_subcommand(
      "yarn",
      "Write the YaRN cos/sin tables (Megatron's YarnRotaryEmbedding; scaling factor 1 is "
      "plain RoPE) as DIR/cos.npy and DIR/sin.npy [rows, emb_dim] (bf16 as raw <u2 bits), and "
      "DIR/yarn.json: the parameters; its \"yarn\" object, as a case.json's \"yarn\" key, names "
      "these tables instead of shipping them.");
  YarnParams& p = y.table.params;
  cmd->add_option("--rows", y.table.rows, "table rows (positions offset .. offset + rows - 1)")
      ->required()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--emb-dim", y.emb_dim, "rope dimension (even)")->required();
  cmd->add_option("--offset", y.table.offset, "position of row 0")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--rotary-base", p.rotary_base, "rotary base")->capture_default_str();
  cmd->add_option("--scaling-factor", p.scaling_factor, "YaRN scaling factor (1: plain RoPE)")
      ->capture_default_str();
  cmd->add_option("--original-max-position-embeddings", p.original_max_position_embeddings,
                  "original context length")
      ->capture_default_str();
  cmd->add_option("--beta-fast", p.beta_fast, "YaRN beta_fast")->capture_default_str();
  cmd->add_option("--beta-slow", p.beta_slow, "YaRN beta_slow")->capture_default_str();
  cmd->add_option("--mscale", p.mscale, "YaRN mscale")->capture_default_str();
  cmd->add_option("--mscale-all-dim", p.mscale_all_dim, "YaRN mscale_all_dim")
      ->capture_default_str();
  cmd->add_option("--concentration", y.concentration,
                  "factor of the tables (default: mscale(s, mscale) / mscale(s, mscale_all_dim))");
  cmd->add_option("--table-layout", y.table_layout, "half ([f, f], Megatron's) or interleaved")
      ->capture_default_str();
  cmd->add_option("--dtype", y.dtype, "f32, f16 or bf16")->capture_default_str();
  cmd->add_option("--backend", y.backend, "reference, or host (the kernel)")->capture_default_str();
  cmd->add_option("--out", y.out, "output directory (created if missing)")->required();
}

}  // namespace

// Parse errors and the commands' exceptions are caught below; only the setup of the options can
// throw (CLI::ConstructionError, a bug in this file; bad_alloc), and then terminating is meant.
int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape): see above
  CLI::App app{"mlarope: MLA RoPE primitives and the harness that checks them.\n"
               "Case files (a directory with case.json and .npy inputs) are described in "
               "docs/semantics.md §7.\n" +
               std::string(kExitStatuses)};
  app.require_subcommand(1);
  app.set_version_flag("--version", "mlarope 0.1.0");
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "mlarope: error: " + std::string(e.what()) + " (see --help)\n";
  });
  RunOptions run;
  CheckCommandOptions check;
  FuzzCommandOptions fuzz;
  reports::ReportOptions report;
  reports::CompareCommandOptions compare;
  YarnCommandOptions yarn;
  add_run(app, run);
  add_report(app, report);
  add_compare(app, compare);
  add_check(app, check);
  add_fuzz(app, fuzz);
  add_yarn(app, yarn);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitError;
  }
  try {
    if (app.got_subcommand("run")) return run_command(run);
    if (app.got_subcommand("check")) return check_command(check);
    if (app.got_subcommand("fuzz")) return fuzz_command(fuzz);
    if (app.got_subcommand("report")) return gate_exit("report", reports::report_command(report));
    if (app.got_subcommand("compare"))
      return gate_exit("compare", reports::compare_command(compare));
    if (app.got_subcommand("yarn")) return yarn_command(yarn);
  } catch (const std::exception& e) {
    std::cerr << "mlarope: error: " << e.what() << "\n";
    return kExitError;
  }
  return 0;
}
