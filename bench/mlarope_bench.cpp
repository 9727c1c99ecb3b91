// SPDX-License-Identifier: Apache-2.0
// Google Benchmark of every op on every host-memory backend (reference, host) at realistic
// shapes, with the minimum traffic of each op, GB/s, and the fraction of the copy bandwidth
// measured in the same run. `--full` runs the full set (T 1K..16K); the default is a smoke set.
// On the host backend, the GPU model's figures and the timing model's H200 prediction of each
// call (model_* counters) come beside the measurement, unless MLAROPE_BENCH_NO_MODEL is set
// (ci/bench-compare.sh sets it: they take a few seconds a run and are no timing).
// The JSON's context names the machine (host, CPU model, cores, copy bandwidth), so that a
// stored baseline gates only the machine it was recorded on. `--compare A B` times two
// backends interleaved in this process and applies the benchmark gate (reports/compare.h).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/case_run.h"
#include "backends/device_backend.h"
#include "bench_calls.h"
#include "command_line.h"
#include "compare.h"
#include "driver_support.h"
#include "io/junit.h"
#include "mlarope/error.h"
#include "mlarope/timing.h"
#include "shapes.h"

using namespace mlarope;
using namespace mlarope::bench;

namespace {

// Copy `bytes` from src to dst split over the machine's cores.
void parallel_copy(char* dst, const char* src, std::size_t bytes) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  const std::size_t chunk = (bytes + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    const std::size_t begin = t * chunk, end = std::min(bytes, begin + chunk);
    if (begin < end) pool.emplace_back([=] { std::memcpy(dst + begin, src + begin, end - begin); });
  }
  for (std::thread& th : pool) th.join();
}

// Bytes per second of a parallel copy (read + write counted): the median of 9 runs of 256 MiB
// (a median, not the best, so that one lucky burst does not move every floor fraction).
double copy_bandwidth() {
  static const double bandwidth = [] {
    const std::size_t bytes = 256u << 20;
    std::vector<char> a(bytes, 1), b(bytes, 2);
    std::vector<double> seconds;
    for (int i = 0; i < 9; ++i) {
      const auto start = std::chrono::steady_clock::now();
      parallel_copy(b.data(), a.data(), bytes);
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(seconds.begin(), seconds.end());
    return 2.0 * bytes / seconds[seconds.size() / 2];
  }();
  return bandwidth;
}

void set_counters(benchmark::State& state, std::int64_t bytes, double seconds) {
  set_floor_counters(state, bytes, seconds, copy_bandwidth());
}

// Run `body` once per iteration and return the seconds the loop took.
template <class F>
double timed_loop(benchmark::State& state, F&& body) {
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    body();
    benchmark::ClobberMemory();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Input sets to rotate among so that the data of one pass (>= 64 MiB) does not sit in cache.
int rotation_sets(std::int64_t bytes) { return bench::rotation_sets(bytes, 64ll << 20); }

// The input sets of a shape, kept for the benchmarks that follow (Google Benchmark calls a
// benchmark function several times, and with random interleaving the shapes alternate): the
// most recently used shapes stay while they hold at most kFixtureBudget bytes together.
std::vector<std::unique_ptr<Fixture>>& fixtures_for(const Shape& shape, int sets) {
  constexpr std::size_t kFixtureBudget = std::size_t{3} << 30;
  struct Entry {
    std::vector<std::unique_ptr<Fixture>> fixtures;
    std::size_t bytes = 0;
    std::uint64_t used = 0;
  };
  static std::map<std::string, Entry> cache;
  static std::uint64_t clock = 0;
  const std::string wanted = shape_label(shape);
  Entry& entry = cache[wanted];
  entry.used = ++clock;
  for (;;) {  // free the least recently used other shapes first, so the new sets fit
    std::size_t total = 0;
    for (const auto& [_, e] : cache) total += e.bytes;
    const std::size_t per_set = entry.fixtures.empty() ? 0 : entry.bytes / entry.fixtures.size();
    if (total + per_set * (sets - std::min<std::size_t>(sets, entry.fixtures.size())) <=
            kFixtureBudget ||
        cache.size() == 1)
      break;
    auto oldest = cache.end();
    for (auto it = cache.begin(); it != cache.end(); ++it)
      if (it->first != wanted && (oldest == cache.end() || it->second.used < oldest->second.used))
        oldest = it;
    cache.erase(oldest);
  }
  while (static_cast<int>(entry.fixtures.size()) < sets) {
    entry.fixtures.push_back(std::make_unique<Fixture>(shape));
    const Fixture& f = *entry.fixtures.back();
    entry.bytes += f.bytes();
  }
  return entry.fixtures;
}

// What the host backend's GPU model and the timing model (include/mlarope/timing.h) say of
// `op` at `shape`, run on `fixture` (the full shape; a sample of runs of the launch's blocks,
// so that it takes a moment): the sector efficiency, predicted DRAM bytes over the op's
// minimum, and the time on an H200. Computed once per (op, shape).
struct ModelFigures {
  double sector_efficiency = 0, dram_fraction = 0;
  TimePrediction h200;                   ///< summed over the op's launches (one, for every op here)
  std::string cuda_kernel;               ///< the CUDA kernel of the (last) launch
  std::int64_t largest_batch_bytes = 0;  ///< over the launches' threads
};

// The device the model tables predict: the carried H200 profile, or the one `--profile=FILE`
// names (a refit that `fit_timing_model --sweep` wrote, say), read before any prediction.
DeviceProfile& model_device() {
  static DeviceProfile device = device_profile("h200");
  return device;
}

const ModelFigures& model_figures(BenchOp op, const Shape& shape, Fixture& fixture) {
  static std::map<std::string, ModelFigures> cache;
  const std::string key = to_string(op) + "/" + shape_label(shape);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  const harness::Backend model =
      harness::host_backend(0, harness::HostMode::gpu_model,
                            std::max<std::int64_t>(1, shape.tokens / 64));
  make_call(op, fixture, model)();
  const DeviceProfile& h200 = model_device();
  ModelLaunchStats total;
  ModelFigures f;
  for (const ModelLaunchStats& s : model.take_model_stats()) {
    f.cuda_kernel = cuda_kernel_of(s.kernel);
    f.largest_batch_bytes = std::max(f.largest_batch_bytes, s.largest_batch_bytes);
    total.useful_bytes += s.useful_bytes;
    total.warp_sector_bytes += s.warp_sector_bytes;
    const TimePrediction p = predict_time(s, resource_of(s.kernel, built_kernel_resources()), h200,
                                          minimum_bytes(op, shape));
    total.dram_bytes += static_cast<std::int64_t>(p.dram_bytes);
    const double seconds = f.h200.seconds + p.seconds;
    f.h200 = p;
    f.h200.seconds = seconds;
  }
  f.h200.floor_fraction =
      static_cast<double>(minimum_bytes(op, shape)) / h200.copy_bandwidth / f.h200.seconds;
  f.sector_efficiency = total.sector_efficiency();
  f.dram_fraction =
      static_cast<double>(total.dram_bytes) / static_cast<double>(minimum_bytes(op, shape));
  return cache[key] = f;
}

// The timing model's counters of a prediction.
void set_model_counters(benchmark::State& state, const TimePrediction& p) {
  state.counters["model_floor_fraction"] = p.floor_fraction;
  state.counters["model_time_us"] = p.seconds * 1e6;
  if (p.occupancy.blocks_per_sm > 0) {
    state.counters["model_blocks_per_sm"] = p.occupancy.blocks_per_sm;
    state.counters["model_waves"] = p.waves;
    state.counters["model_KiB_in_flight_per_sm"] = p.bytes_in_flight_per_sm / 1024;
    state.counters["model_round_trips"] = p.round_trips_per_block;
    state.counters["model_bandwidth_drawn"] = p.bandwidth_drawn;
    state.counters["model_bandwidth_available"] = p.bandwidth_available;
  }
}

void run_op(benchmark::State& state, BenchOp op, const Shape& shape,
            const harness::Backend& backend) {
  const std::int64_t bytes = minimum_bytes(op, shape);
  const int sets = rotation_sets(bytes);
  std::vector<std::unique_ptr<Fixture>>& fixtures = fixtures_for(shape, sets);
  std::vector<std::function<void()>> calls;
  calls.reserve(static_cast<std::size_t>(sets));
  for (int i = 0; i < sets; ++i) calls.push_back(make_call(op, *fixtures[i], backend));
  try {
    for (auto& call : calls) call();         // warm-up
  } catch (const harness::Unsupported& e) {  // a plugin declining the shape: shown, not timed
    state.SkipWithError((std::string("not supported: ") + e.what()).c_str());
    return;
  }
  copy_bandwidth();
  std::size_t next = 0;
  const double seconds = timed_loop(state, [&] { calls[next++ % calls.size()](); });
  set_counters(state, bytes, seconds);
  static const bool with_model = std::getenv("MLAROPE_BENCH_NO_MODEL") == nullptr;
  if (backend.name == "host" &&
      with_model) {  // what the same kernels would do on a GPU, by the models
    const ModelFigures& f = model_figures(op, shape, *fixtures.front());
    state.counters["model_sector_efficiency"] = f.sector_efficiency;
    state.counters["model_dram_fraction"] = f.dram_fraction;
    set_model_counters(state, f.h200);
  }
}

// A plain parallel copy moving the same bytes as `op` (half read, half written).
void run_copy(benchmark::State& state, BenchOp op, const Shape& shape) {
  const std::int64_t bytes = minimum_bytes(op, shape);
  const int sets = rotation_sets(bytes);
  std::vector<char> src(sets * (bytes / 2), 1), dst(sets * (bytes / 2), 0);
  copy_bandwidth();
  std::int64_t next = 0;
  const double seconds = timed_loop(state, [&] {
    const std::int64_t offset = (next++ % sets) * (bytes / 2);
    parallel_copy(dst.data() + offset, src.data() + offset, bytes / 2);
  });
  set_counters(state, bytes, seconds);
  set_model_counters(state, predict_copy_time(bytes, device_profile("h200")));  // a GPU's copy
}

// rope_inplace's access pattern with next to no arithmetic: each head's rope slice (a short
// run, one head stride from the next) read and written back in place, 8 bytes at a time (each
// word plus 1), rows split over the cores. Its floor_fraction is the most this pattern allows on
// the machine, below the copy's: the other bytes of each head's cache lines travel too.
void strided_touch(char* base, const Shape& s) {
  const std::size_t e = dtype_size(s.dtype);
  const std::size_t head = static_cast<std::size_t>(s.nope_dim + s.emb_dim) * e;
  const std::size_t nope = static_cast<std::size_t>(s.nope_dim) * e,
                    slice = static_cast<std::size_t>(s.emb_dim) * e;
  const std::int64_t heads = s.tokens * s.heads;
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([=] {
      for (std::int64_t h = heads * t / threads; h < heads * (t + 1) / threads; ++h) {
        char* p = base + static_cast<std::size_t>(h) * head + nope;
        for (std::size_t b = 0; b + 8 <= slice; b += 8) {
          std::uint64_t x;
          std::memcpy(&x, p + b, 8);
          x += 1;
          std::memcpy(p + b, &x, 8);
        }
      }
    });
  for (std::thread& th : pool) th.join();
}

void run_strided_floor(benchmark::State& state, Shape shape) {
  const std::int64_t bytes = minimum_bytes(BenchOp::rope_inplace, shape);
  const std::size_t tensor =
      static_cast<std::size_t>(shape.tokens * shape.heads * (shape.nope_dim + shape.emb_dim)) *
      dtype_size(shape.dtype);
  const int sets = rotation_sets(bytes);
  std::vector<char> buffer(sets * tensor, 1);
  copy_bandwidth();
  std::int64_t next = 0;
  const double seconds =
      timed_loop(state, [&] { strided_touch(buffer.data() + (next++ % sets) * tensor, shape); });
  set_counters(state, bytes, seconds);
}

// The value of `flag=VALUE` (removed from argv), or "" when absent.
std::string take_value(int& argc, char** argv, const std::string& flag) {
  const std::string prefix = flag + "=";
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind(prefix, 0) == 0) {
      std::string value = std::string(argv[i]).substr(prefix.size());
      std::copy(argv + i + 1, argv + argc, argv + i);
      --argc;
      return value;
    }
  return "";
}

// A backend name usable in a benchmark label: characters other than [A-Za-z0-9_.:-] become _.
std::string label_name(std::string name) {
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '.' && ch != ':' &&
        ch != '-')
      ch = '_';
  return name;
}

// The CPU's model name (/proc/cpuinfo), or "" where the file does not say.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const std::size_t colon = line.find(':');
      if (colon == std::string::npos) break;
      const std::size_t start = line.find_first_not_of(' ', colon + 1);
      return start == std::string::npos ? "" : line.substr(start);
    }
  return "";
}

const std::vector<BenchOp> kOps = {BenchOp::rope, BenchOp::rope_inplace, BenchOp::rope_backward,
                                   BenchOp::kv_split, BenchOp::kv_split_backward};

// The floor fraction of every repetition of each benchmark, keyed by its name without the
// "/real_time" suffix, while the console shows the runs as usual.
class SampleCollector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs)
      if (run.run_type == Run::RT_Iteration && !run.error_occurred) {
        const auto it = run.counters.find("floor_fraction");
        if (it == run.counters.end()) continue;
        std::string name = run.benchmark_name();
        const std::string suffix = "/real_time";
        if (name.size() > suffix.size() &&
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
          name.resize(name.size() - suffix.size());
        samples[name].push_back(it->second.value);
      }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, std::vector<double>> samples;
};

// `--compare A B`: A (the base) and B (the change) registered as "op/base/shape" and
// "op/change/shape", run with repetitions in random interleaving; the keys "op/compare/shape"
// compared; the SLOWER ones measured once more (a second look must repeat them). Returns the
// gate's exit status.
int run_compare(const harness::Backend& a, const harness::Backend& b, bool full,
                const std::string& out_dir) {
  for (const Shape& shape : bench_shapes(full))
    for (const harness::Backend* backend : {&a, &b})
      for (BenchOp op : kOps) {
        const std::string label =
            to_string(op) + "/" + (backend == &a ? "base" : "change") + "/" + shape_label(shape);
        benchmark::RegisterBenchmark(label.c_str(), run_op, op, shape, *backend)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
  const auto measure = [&](const std::string& filter) {  // "": the command line's filter
    SampleCollector collector;
    if (filter.empty()) benchmark::RunSpecifiedBenchmarks(&collector);
    else benchmark::RunSpecifiedBenchmarks(&collector, filter);
    reports::Samples base, change;
    for (auto& [name, values] : collector.samples) {
      const std::size_t first = name.find('/'), second = name.find('/', first + 1);
      const std::string side = name.substr(first + 1, second - first - 1);
      const std::string key = name.substr(0, first) + "/compare" + name.substr(second);
      (side == "base" ? base : change)[key] = values;
    }
    return reports::compare(base, change, reports::CompareOptions{});
  };
  reports::Comparison result = measure("");
  if (!result.slower_keys().empty()) {
    std::string filter;  // the SLOWER keys' two sides, nothing else
    for (const std::string& key : result.slower_keys()) {
      const std::size_t first = key.find('/'), second = key.find('/', first + 1);
      filter += std::string(filter.empty() ? "" : "|") + "^" + key.substr(0, first) +
                "/(base|change)" + key.substr(second) + "/";
    }
    std::cout << "\nmlarope_bench: " << result.slower_keys().size()
              << " keys SLOWER; measuring them once more\n";
    result = reports::confirm(result, measure(filter));
  }
  const std::string md = "# mlarope_bench --compare " + a.name + " " + b.name +
                         "\n\nbase = " + a.name + ", change = " + b.name + "\n\n" +
                         reports::comparison_markdown(result);
  std::cout << "\n" << md;
  if (!out_dir.empty()) {
    std::filesystem::create_directories(out_dir);
    std::ofstream(std::filesystem::path(out_dir) / "compare.json")
        << reports::to_json(result).dump(1) << "\n";
    std::ofstream(std::filesystem::path(out_dir) / "summary.md") << md;
    harness::write_junit(
        (std::filesystem::path(out_dir) / "junit.xml").string(),
        {reports::junit_suite(result, "mlarope_bench --compare " + a.name + " " + b.name)});
  }
  reports::GateResult gate;
  gate.comparison = result;
  return gate.exit_status();
}

// A backend by name: "host" is the fast mode (the GPU model is for the checks), "reference",
// or "plugin:PATH.so"; throws mlarope::Error for other names.
// The shape of a THD call with many short sequences (70,000 of 2 rows, one head of emb_dim 4,
// f32): where a THD grid's gate (every block reads every sequence) weighs most.
Shape many_sequences_shape() {
  Shape s;
  s.model = "packed";
  s.layout = TokenLayout::thd;
  s.tokens = 140000;
  s.heads = 1;
  s.emb_dim = 4;
  s.dtype = DType::f32;
  for (std::int32_t i = 0; i <= 70000; ++i) s.cu_seqlens.push_back(2 * i);
  return s;
}

// Seconds of one call of `call`.
double seconds_of(const std::function<void()>& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `--model-cost`: what the checking mode costs. For every op and shape of the set, and rope on
// many_sequences_shape(), one call under the host backend's GPU model (every block, every
// access checked) against the fast mode (the median of 5 calls after one), with the model's
// state and index loads; a Markdown table on stdout. Exit status 1 when a call's model time
// is more than `limit` times its fast time.
int run_model_cost(bool full, double limit) {
  const harness::Backend fast = harness::host_backend(0, harness::HostMode::fast);
  const harness::Backend model = harness::host_backend(0, harness::HostMode::gpu_model, 1);
  std::vector<std::pair<BenchOp, Shape>> cases;
  for (const Shape& shape : bench_shapes(full))
    for (BenchOp op : kOps) cases.emplace_back(op, shape);
  cases.emplace_back(BenchOp::rope, many_sequences_shape());
  std::printf("| op | shape | fast ms | model ms | model / fast | model state MiB | op's bytes MiB "
              "| index loads |\n"
              "|---|---|---:|---:|---:|---:|---:|---:|\n");
  int status = 0;
  for (const auto& [op, shape] : cases) {
    Fixture fixture(shape);
    const std::function<void()> fast_call = make_call(op, fixture, fast);
    fast_call();
    std::vector<double> times;
    times.reserve(5);
    for (int i = 0; i < 5; ++i) times.push_back(seconds_of(fast_call));
    std::sort(times.begin(), times.end());
    const double model_seconds = seconds_of(make_call(op, fixture, model));
    std::int64_t state = 0, index_loads = 0;
    for (const ModelLaunchStats& m : model.take_model_stats())
      state = std::max(state, m.model_bytes), index_loads += m.index_loads;
    const double ratio = model_seconds / times[2];
    std::printf("| %s | %s | %.2f | %.1f | %.1f | %.1f | %.1f | %lld |\n", to_string(op).c_str(),
                shape_label(shape).c_str(), times[2] * 1e3, model_seconds * 1e3, ratio,
                state / 1048576.0, minimum_bytes(op, shape) / 1048576.0,
                static_cast<long long>(index_loads));
    std::fflush(stdout);
    if (ratio > limit) status = 1;
  }
  if (status != 0)
    std::fprintf(stderr, "mlarope_bench: a call's model time is over %g times its fast time\n",
                 limit);
  return status;
}

// The targets a kernel is held to under the timing model: at most `copy_ratio` times a copy of
// the same bytes, and at least `floor_fraction` of the copy floor (0: none).
struct ModelTarget {
  double copy_ratio, floor_fraction;
};
ModelTarget model_target(const Shape& shape) {
  if (shape.model != "dsv3") return {1.25, 0};  // the H = 16 shapes
  return {1.10, shape.tokens >= 4096 ? 0.85 : 0};
}

// `--model-table`: for every op and shape of the set, the timing model's H200 prediction of
// the kernels against a copy of the same bytes, with occupancy, bytes in flight, waves, the
// share of the copy bandwidth it draws and what bounds it, and whether it meets model_target; a
// Markdown table on stdout. Exit status 1 when a row misses.
int run_model_table(bool full, const std::string& json_path) {
  const DeviceProfile& h200 = model_device();
  std::string json = "[";
  std::printf(
      "| op | shape | model us | copy us | model / copy | floor fraction | blocks/SM "
      "(limit) | KiB in flight/SM | waves | round trips | DRAM drawn / available | bound by | "
      "target | meets |\n"
      "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---|---|\n");
  int missed = 0, rows = 0;
  for (const Shape& shape : bench_shapes(full)) {
    Fixture fixture(shape);
    for (BenchOp op : kOps) {
      const ModelFigures& f = model_figures(op, shape, fixture);
      const TimePrediction& p = f.h200;
      const TimePrediction copy = predict_copy_time(minimum_bytes(op, shape), h200);
      const ModelTarget target = model_target(shape);
      const double ratio = p.seconds / copy.seconds;
      const bool meets = ratio <= target.copy_ratio && p.floor_fraction >= target.floor_fraction;
      char wanted[64];
      std::snprintf(wanted, sizeof wanted, "<= %.2fx%s", target.copy_ratio,
                    target.floor_fraction > 0 ? ", >= 0.85" : "");
      std::printf("| %s | %s | %.1f | %.1f | %.2f | %.2f | %d (%s) | %.1f | %.2f | %.1f "
                  "| %.2f / %.2f | %s | %s | %s |\n",
                  to_string(op).c_str(), shape_label(shape).c_str(), p.seconds * 1e6,
                  copy.seconds * 1e6, ratio, p.floor_fraction, p.occupancy.blocks_per_sm,
                  p.occupancy.limit.c_str(), p.bytes_in_flight_per_sm / 1024, p.waves,
                  p.round_trips_per_block, p.bandwidth_drawn, p.bandwidth_available,
                  p.limit.c_str(), wanted, meets ? "yes" : "**no**");
      std::fflush(stdout);
      char line[640];
      std::snprintf(line, sizeof line,
                    "%s\n {\"op\": \"%s\", \"shape\": \"%s\", \"kernel\": \"%s\", "
                    "\"model_us\": %.3f, \"copy_us\": %.3f, \"floor_fraction\": %.4f, "
                    "\"blocks_per_sm\": %d, \"KiB_in_flight_per_sm\": %.2f, \"waves\": %.3f, "
                    "\"round_trips\": %.2f, \"index_round_trips\": %.2f, \"load_phases\": %.2f, "
                    "\"latency_us\": %.3f, \"largest_batch_bytes\": %lld, "
                    "\"bandwidth_drawn\": %.4f, \"bandwidth_available\": %.4f, "
                    "\"bound\": \"%s\", \"meets\": %s}",
                    rows > 0 ? "," : "", to_string(op).c_str(), shape_label(shape).c_str(),
                    f.cuda_kernel.c_str(), p.seconds * 1e6, copy.seconds * 1e6, p.floor_fraction,
                    p.occupancy.blocks_per_sm, p.bytes_in_flight_per_sm / 1024, p.waves,
                    p.round_trips_per_block, p.index_round_trips_per_block, p.load_phases_per_block,
                    p.latency * 1e6, static_cast<long long>(f.largest_batch_bytes),
                    p.bandwidth_drawn, p.bandwidth_available, p.limit.c_str(),
                    meets ? "true" : "false");
      json += line;
      ++rows;
      if (!meets) ++missed;
    }
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << json << "\n]\n";
    if (!out) throw Error(json_path + ": cannot write");
  }
  if (missed > 0)
    std::fprintf(stderr, "mlarope_bench: %d of %d rows miss the timing model's target\n", missed,
                 rows);
  return missed > 0 ? 1 : 0;
}

harness::Backend bench_backend(const std::string& name) {
  if (name == "host") {
    harness::Backend fast = harness::host_backend(0, harness::HostMode::fast);
    fast.name = "host";
    return fast;
  }
  if (name == "cuda") throw Error("cuda: time the CUDA backend with cuda_bench");
  harness::Backend backend = harness::find_backend(name);
  backend.name = label_name(backend.name);
  return backend;
}

}  // namespace

int main(int argc, char** argv) {
  const bool full = take_flag(argc, argv, "--full");
  const std::string plugin = take_value(argc, argv, "--backend");
  const std::string compare_out = take_value(argc, argv, "--compare-out");
  std::vector<std::string> compare;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--compare") {
      if (i + 2 >= argc) {
        std::fprintf(stderr,
                     "mlarope_bench: --compare takes two backends: --compare BASE CHANGE\n");
        return 2;
      }
      compare = {argv[i + 1], argv[i + 2]};
      std::copy(argv + i + 3, argv + argc, argv + i);
      argc -= 3;
      break;
    }
  if (take_flag(argc, argv, "--model-cost")) {
    try {
      return run_model_cost(full, 50);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mlarope_bench: error: %s\n", e.what());
      return 2;
    }
  }
  if (take_flag(argc, argv, "--model-table")) {
    try {
      if (const std::string profile = take_value(argc, argv, "--profile"); !profile.empty())
        model_device() = parse_device_profile(read_named_file(profile));
      return run_model_table(full, take_value(argc, argv, "--json"));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mlarope_bench: error: %s\n", e.what());
      return 2;
    }
  }
  if (take_flag(argc, argv, "--help-mlarope")) {
    std::printf(
        "mlarope_bench [--full] [--backend=plugin:PATH.so] [Google Benchmark flags]\n"
        "  default: smoke set (T=1K); --full: T 1K..16K, both models, both layouts\n"
        "  --backend=plugin:PATH.so: also time a kernel plugin (include/mlarope/plugin.h)\n"
        "mlarope_bench --compare BASE CHANGE [--compare-out=DIR] [--full] [Google Benchmark "
        "flags]\n"
        "  time two backends (host, reference, plugin:PATH.so) interleaved, 9 repetitions each in\n"
        "  random order (unless the flags say otherwise), and gate CHANGE against BASE key by "
        "key:\n"
        "  exit status 1 when a key is SLOWER twice (p < 0.002 after Holm and a drop beyond "
        "10%%),\n"
        "  3 when a key is UNKNOWN; --compare-out writes compare.json, summary.md and junit.xml\n"
        "mlarope_bench --model-cost [--full]\n"
        "  the checking mode's price: each op and shape (and rope on 70,000 sequences of 2 rows)\n"
        "  once under the host backend's GPU model against the fast mode's median of 5; a "
        "Markdown\n"
        "  table; exit status 1 when the model takes more than 50 times the fast mode\n"
        "mlarope_bench --model-table [--full] [--json=FILE] [--profile=FILE]\n"
        "  the timing model's H200 time of each op and shape against a copy of the same bytes,\n"
        "  with occupancy, KiB in flight per SM and waves; a Markdown table (and with --json the\n"
        "  rows, each with its CUDA kernel and largest batch of loads); exit status 1 when\n"
        "  a row misses its target (DeepSeek-V3: <= 1.10x the copy, >= 0.85 of the floor at\n"
        "  T >= 4K; H = 16: <= 1.25x); --profile: a device profile (JSON, as in\n"
        "  cuda/host/devices/h200.json) in place of the carried one\n");
    return 0;
  }
  copy_bandwidth();  // measured before the context is written, which names it
  explain_library_build();
  benchmark::AddCustomContext("cpu_model", cpu_model());
  benchmark::AddCustomContext("copy_GBps", std::to_string(copy_bandwidth() * 1e-9));
  if (!compare.empty()) {
    try {
      const harness::Backend a = bench_backend(compare[0]), b = bench_backend(compare[1]);
      benchmark::AddCustomContext("compare_base", a.name);
      benchmark::AddCustomContext("compare_change", b.name);
      // Nine repetitions in random order unless the command line sets them: Initialize reads
      // argv, so the defaults go in front of what the user gave.
      std::vector<char*> args(argv, argv + argc);
      static char reps[] = "--benchmark_repetitions=9",
                  interleave[] = "--benchmark_enable_random_interleaving=true",
                  min_time[] = "--benchmark_min_time=0.05";
      args.insert(args.begin() + 1, {reps, interleave, min_time});
      int count = static_cast<int>(args.size());
      benchmark::Initialize(&count, args.data());
      if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 2;
      const int status = run_compare(a, b, full, compare_out);
      benchmark::Shutdown();
      return status;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mlarope_bench: error: %s\n", e.what());
      return 2;
    }
  }
  std::vector<harness::Backend> backends;
  for (const std::string& name : harness::backend_names())
    if (name != "cuda") backends.push_back(bench_backend(name));  // CUDA: cuda_bench
  if (!plugin.empty()) {
    if (plugin.rfind("plugin:", 0) != 0) {
      std::fprintf(
          stderr,
          "mlarope_bench: --backend takes plugin:PATH.so (the built-in backends always run)\n");
      return 2;
    }
    try {
      backends.push_back(bench_backend(plugin));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mlarope_bench: error: %s\n", e.what());
      return 2;
    }
  }
  for (const Shape& shape : bench_shapes(full))  // shape outermost: its buffers are made once
    for (const harness::Backend& backend : backends)
      for (BenchOp op : kOps) {
        const std::string label = to_string(op) + "/" + backend.name + "/" + shape_label(shape);
        benchmark::RegisterBenchmark(label.c_str(), run_op, op, shape, backend)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
  for (const Shape& shape : bench_shapes(full))
    for (BenchOp op : {BenchOp::rope, BenchOp::rope_inplace, BenchOp::kv_split}) {
      const std::string label = to_string(op) + "/copy/" + shape_label(shape);
      benchmark::RegisterBenchmark(label.c_str(), run_copy, op, shape)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  for (const Shape& shape : bench_shapes(full)) {
    const std::string label = "rope_inplace/strided_floor/" + shape_label(shape);
    benchmark::RegisterBenchmark(label.c_str(), run_strided_floor, shape)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
