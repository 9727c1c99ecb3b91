// SPDX-License-Identifier: Apache-2.0
// Google Benchmark of every op on the CUDA backend at the shapes of mlarope_bench, timed with
// CUDA events on the stream the ops run on (the performance model of docs/architecture.md). Same
// names
// (`op/cuda/shape_label`, and `op/copy_cuda/shape_label` for a device copy of the same bytes)
// and counters (`bytes`, `GBps`, `copy_GBps`, `floor_fraction`) as mlarope_bench, so that
// `mlarope report` reads both.
//
// Timing: every benchmark iteration is one measurement of `reps` calls between two events,
// rotating among input sets that together hold at least 256 MiB and twice the L2 cache (so
// no call is timed out of cache; the context says how much), after a warm-up batch; the
// iteration time (UseManualTime) is the measurement over `reps`, so `real_time` is the time
// of one call. `copy_GBps` is the bandwidth of a >= 1 GiB device-to-device cudaMemcpyAsync
// (read + write counted), measured once per run. After each measurement the SM clock and
// the clock-event reasons are read through NVML (loaded at run time, when the driver has it):
// `sm_clock_MHz` (mean), `sm_clock_min_MHz` and `throttled` (the share of measurements a
// power or thermal limit held the clock down), so a slow figure from a throttled GPU shows.
//
//   cuda_bench [--full] [--graph] [Google Benchmark flags]
//     --full   the full shape set of mlarope_bench (T 1K..16K, both models, both layouts)
//     --graph  replay each measurement's calls as one CUDA graph (no CPU launch overhead)
//
// Without a CUDA device it prints one line and exits 0.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "command_line.h"
#include "driver_support.h"
#include "host_convert.h"
#include "mlarope/backend.h"
#include "shapes.h"

using namespace mlarope;
using namespace mlarope::bench;

namespace {

constexpr std::size_t kMinRotationBytes = std::size_t{256} << 20;  // at least; 2x the L2 if larger
constexpr std::size_t kCopyBytes = std::size_t{1} << 30;           // copy_GBps: a 1 GiB copy
constexpr double kMeasurementBytes = 4.0 * (1u << 30);  // traffic of one measurement (~1 ms)

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("cuda_bench: ") + what + ": " + cudaGetErrorString(e));
}

bool g_graph = false;              // --graph
std::unique_ptr<Stream> g_stream;  // the CUDA stream every benchmark runs on
std::size_t g_rotation_bytes =
    kMinRotationBytes;  // what the input sets of a benchmark hold together

// The SM clock and the reasons it is held down, read through NVML, which the driver installs
// (libnvidia-ml.so.1): loaded at run time so that the benchmark builds and runs without it.
// The few entry points and constants used are NVML's stable C ABI.
class ClockMonitor {
 public:
  struct Sample {
    unsigned mhz = 0;
    bool throttled = false;  ///< a power or thermal limit held the clock down
  };

  /// Attach to the NVML device of the CUDA device `device`; available() says whether it worked.
  explicit ClockMonitor(int device) {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      why_ = "libnvidia-ml.so.1 not found";
      return;
    }
    auto init = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlInit_v2"));
    auto by_bus = reinterpret_cast<int (*)(const char*, void**)>(
        dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock_ =
        reinterpret_cast<int (*)(void*, int, unsigned*)>(dlsym(lib_, "nvmlDeviceGetClockInfo"));
    max_clock_ =
        reinterpret_cast<int (*)(void*, int, unsigned*)>(dlsym(lib_, "nvmlDeviceGetMaxClockInfo"));
    reasons_ = reinterpret_cast<int (*)(void*, unsigned long long*)>(
        dlsym(lib_, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (!reasons_)  // the name before NVML 12.2
      reasons_ = reinterpret_cast<int (*)(void*, unsigned long long*)>(
          dlsym(lib_, "nvmlDeviceGetCurrentClocksThrottleReasons"));
    char bus[32] = {};
    if (!init || !by_bus || !clock_ || !reasons_) {
      why_ = "an NVML entry point is missing";
    } else if (init() != 0) {
      why_ = "nvmlInit failed";
    } else if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess ||
               by_bus(bus, &device_) != 0) {
      why_ = "no NVML device at the CUDA device's PCI bus id";
    }
  }
  ClockMonitor(const ClockMonitor&) = delete;
  ClockMonitor& operator=(const ClockMonitor&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& why_not() const { return why_; }

  /// The clock now; zero when unavailable.
  Sample sample() const {
    Sample s;
    unsigned long long reasons = 0;
    if (!available() || clock_(device_, kClockSm, &s.mhz) != 0 || reasons_(device_, &reasons) != 0)
      return {};
    s.throttled = (reasons & kLimitReasons) != 0;
    return s;
  }
  /// The largest SM clock the device allows; zero when unavailable.
  unsigned max_mhz() const {
    unsigned mhz = 0;
    return available() && max_clock_ && max_clock_(device_, kClockSm, &mhz) == 0 ? mhz : 0;
  }

 private:
  static constexpr int kClockSm = 1;  // NVML_CLOCK_SM
  // Software power cap, hardware slowdown, software and hardware thermal slowdown, power
  // brake: the reasons that mean the GPU ran slower than it could (idle, application clocks
  // and sync boost do not).
  static constexpr unsigned long long kLimitReasons = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;
  void* lib_ = nullptr;
  void* device_ = nullptr;
  std::string why_;
  int (*clock_)(void*, int, unsigned*) = nullptr;
  int (*max_clock_)(void*, int, unsigned*) = nullptr;
  int (*reasons_)(void*, unsigned long long*) = nullptr;
};
std::unique_ptr<ClockMonitor> g_clocks;

// The clock over a benchmark's measurements.
struct ClockTally {
  double mhz_sum = 0;
  unsigned min_mhz = 0;
  int samples = 0, throttled = 0;
  void add(const ClockMonitor::Sample& s) {
    if (s.mhz == 0) return;
    mhz_sum += s.mhz;
    min_mhz = samples == 0 ? s.mhz : std::min(min_mhz, s.mhz);
    ++samples;
    throttled += s.throttled;
  }
  void set_counters(benchmark::State& state) const {
    if (samples == 0) return;
    state.counters["sm_clock_MHz"] = mhz_sum / samples;
    state.counters["sm_clock_min_MHz"] = min_mhz;
    state.counters["throttled"] = static_cast<double>(throttled) / samples;
  }
};

cudaStream_t native(Stream& stream) { return static_cast<cudaStream_t>(stream.native_handle()); }

// A pair of CUDA events around work enqueued on a stream.
class EventTimer {
 public:
  EventTimer() {
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  /// Seconds the device took for what `enqueue` puts on `stream`.
  template <class F>
  double seconds(cudaStream_t stream, F&& enqueue) {
    check(cudaEventRecord(start_, stream), "cudaEventRecord");
    enqueue();
    check(cudaEventRecord(stop_, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms * 1e-3;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Random values in (-1, 1) of `dtype`, 1 Mi elements, made once per dtype.
const std::vector<std::byte>& random_tile(DType dtype) {
  static std::map<DType, std::vector<std::byte>> tiles;
  auto it = tiles.find(dtype);
  if (it != tiles.end()) return it->second;
  constexpr std::int64_t kCount = 1 << 20;
  std::vector<std::byte> v(kCount * dtype_size(dtype));
  std::mt19937 rng(static_cast<std::uint32_t>(dtype) + 1);
  std::uniform_real_distribution<double> dist(-1, 1);
  for (std::int64_t i = 0; i < kCount; ++i) store_rounded(v.data(), dtype, i, dist(rng));
  return tiles.emplace(dtype, std::move(v)).first->second;
}

// `bytes` of device memory filled with `tile` repeated: one host-to-device copy, then
// device-to-device doubling. Complete for every stream when it returns.
DeviceBuffer filled_buffer(std::size_t bytes, const std::vector<std::byte>& tile) {
  DeviceBuffer buf(BackendKind::cuda, bytes);
  const std::size_t first = std::min(bytes, tile.size());
  buf.copy_from_host(tile.data(), first);
  char* base = buf.as<char>();
  for (std::size_t done = first; done < bytes;) {
    const std::size_t chunk = std::min(done, bytes - done);
    check(cudaMemcpy(base + done, base, chunk, cudaMemcpyDeviceToDevice), "cudaMemcpy (fill)");
    done += chunk;
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (fill)");
  return buf;
}

DeviceBuffer zero_buffer(std::size_t bytes) {
  DeviceBuffer buf(BackendKind::cuda, bytes);
  buf.fill_bytes(0);
  return buf;
}

// Bytes per second of a device-to-device copy of 1 GiB (read + write counted), best of 5.
double copy_bandwidth() {
  static const double bandwidth = [] {
    Stream& stream = *g_stream;
    DeviceBuffer src = filled_buffer(kCopyBytes, random_tile(DType::f32));
    DeviceBuffer dst = zero_buffer(kCopyBytes);
    EventTimer timer;
    auto copy = [&] {
      check(cudaMemcpyAsync(dst.data(), src.data(), kCopyBytes, cudaMemcpyDeviceToDevice,
                            native(stream)),
            "cudaMemcpyAsync");
    };
    timer.seconds(native(stream), copy);  // warm-up
    double best = 1e30;
    for (int i = 0; i < 5; ++i) best = std::min(best, timer.seconds(native(stream), copy));
    return 2.0 * static_cast<double>(kCopyBytes) / best;
  }();
  return bandwidth;
}

// Input sets to rotate among so that together they hold g_rotation_bytes.
int rotation_sets(std::int64_t bytes) {
  return bench::rotation_sets(bytes, static_cast<std::int64_t>(g_rotation_bytes));
}

// Calls per measurement: a multiple of the sets moving about kMeasurementBytes.
int calls_per_measurement(std::int64_t bytes, int sets) {
  const double per_round = static_cast<double>(bytes) * sets;
  return sets * static_cast<int>(std::max(1.0, std::ceil(kMeasurementBytes / per_round)));
}

// The device buffers of one input set of one op: inputs random, outputs zero, f32 tables,
// THD cu_seqlens.
struct DeviceSet {
  DeviceBuffer in0, in1, out0, out1, cos, sin, cu;
};

// Element counts of an op's tensors: in0/in1 inputs, out0/out1 outputs (0: not used).
struct TensorSizes {
  std::int64_t in0 = 0, in1 = 0, out0 = 0, out1 = 0;
};

TensorSizes tensor_sizes(BenchOp op, const Shape& s) {
  const std::int64_t rows = s.tokens, h = s.heads, d = s.nope_dim + s.emb_dim;
  switch (op) {
    case BenchOp::rope:
    case BenchOp::rope_backward: return {rows * h * d, 0, rows * h * d, 0};
    case BenchOp::rope_inplace: return {rows * h * d, 0, 0, 0};
    case BenchOp::kv_split:  // kv, k_pe -> key, value
      return {rows * h * (s.k_dim + s.v_dim), rows * s.emb_dim, rows * h * (s.k_dim + s.emb_dim),
              rows * h * s.v_dim};
    case BenchOp::kv_split_backward:  // grad_key, grad_value -> grad_kv, grad_k_pe
      return {rows * h * (s.k_dim + s.emb_dim), rows * h * s.v_dim, rows * h * (s.k_dim + s.v_dim),
              rows * s.emb_dim};
  }
  return {};
}

// The rotation sets, calls and (with --graph) the captured measurement of one op at one shape.
struct Fixture {
  BenchOp op;
  Shape s;
  std::vector<DeviceSet> sets;
  std::vector<std::function<void()>> calls;
  int reps = 0;
  std::unique_ptr<Graph> graph;  // --graph: `reps` calls, captured once

  Fixture(BenchOp bench_op, const Shape& shape, Stream& stream) : op(bench_op), s(shape) {
    const std::int64_t bytes = minimum_bytes(op, s);
    const int count = rotation_sets(bytes);
    reps = calls_per_measurement(bytes, count);
    const TensorSizes n = tensor_sizes(op, s);
    const std::size_t e = dtype_size(s.dtype);
    const std::vector<std::byte>& tile = random_tile(s.dtype);
    std::vector<float> cos_host(s.tokens * s.emb_dim), sin_host(s.tokens * s.emb_dim);
    for (std::int64_t p = 0; p < s.tokens; ++p)
      for (std::int64_t k = 0; k < s.emb_dim; ++k) {
        const double angle = p * std::pow(10000.0, -2.0 * (k % (s.emb_dim / 2)) / s.emb_dim);
        cos_host[p * s.emb_dim + k] = static_cast<float>(std::cos(angle));
        sin_host[p * s.emb_dim + k] = static_cast<float>(std::sin(angle));
      }
    const std::size_t table_bytes = cos_host.size() * sizeof(float);
    for (int i = 0; i < count; ++i) {
      DeviceSet d;
      if (n.in0) d.in0 = filled_buffer(n.in0 * e, tile);
      if (n.in1) d.in1 = filled_buffer(n.in1 * e, tile);
      if (n.out0) d.out0 = zero_buffer(n.out0 * e);
      if (n.out1) d.out1 = zero_buffer(n.out1 * e);
      d.cos = DeviceBuffer(BackendKind::cuda, table_bytes);
      d.cos.copy_from_host(cos_host.data(), table_bytes);
      d.sin = DeviceBuffer(BackendKind::cuda, table_bytes);
      d.sin.copy_from_host(sin_host.data(), table_bytes);
      if (s.layout == TokenLayout::thd) {
        const std::size_t cu_bytes = s.cu_seqlens.size() * sizeof(std::int32_t);
        d.cu = DeviceBuffer(BackendKind::cuda, cu_bytes);
        d.cu.copy_from_host(s.cu_seqlens.data(), cu_bytes);
      }
      sets.push_back(std::move(d));
    }
    for (DeviceSet& d : sets) calls.push_back(make_call(d, stream));
  }

  template <class Void>
  BasicTensorView<Void> heads_view(Void* data, std::int64_t heads, std::int64_t width) const {
    if (s.layout == TokenLayout::sbhd)
      return contiguous_view<Void>(data, s.dtype, {s.tokens, 1, heads, width});
    return contiguous_view<Void>(data, s.dtype, {s.tokens, heads, width});
  }

  Rotation rotation(const DeviceSet& d) const {
    Rotation r;  // Megatron's MLA mode, as mlarope_bench
    r.cos = contiguous_view<const void>(d.cos.data(), DType::f32, {s.tokens, s.emb_dim});
    r.sin = contiguous_view<const void>(d.sin.data(), DType::f32, {s.tokens, s.emb_dim});
    return r;
  }

  Positions positions(const DeviceSet& d) const {
    Positions p;
    p.layout = s.layout;
    if (s.layout == TokenLayout::thd) {
      p.cu_seqlens = {d.cu.data(), IndexType::i32, static_cast<std::int64_t>(s.cu_seqlens.size())};
      p.max_seqlen = s.tokens;
    }
    return p;
  }

  // The call of `op` on set `d`, made once and then run in the timing loop.
  std::function<void()> make_call(DeviceSet& d, Stream& stream) const {
    const std::int64_t dim = s.nope_dim + s.emb_dim;
    const RopeArgs ra{s.nope_dim, s.emb_dim, rotation(d), positions(d), nullptr};
    const KvSplitArgs ka{s.k_dim, s.v_dim, s.emb_dim, rotation(d), positions(d), nullptr};
    Stream* st = &stream;
    switch (op) {
      case BenchOp::rope: {
        const RopeCall c{heads_view<const void>(d.in0.data(), s.heads, dim),
                         heads_view<void>(d.out0.data(), s.heads, dim), ra};
        return [=] { mlarope::rope(c, *st); };
      }
      case BenchOp::rope_inplace: {
        const RopeInplaceCall c{heads_view<void>(d.in0.data(), s.heads, dim), ra};
        return [=] { mlarope::rope_inplace(c, *st); };
      }
      case BenchOp::rope_backward: {
        const RopeBackwardCall c{heads_view<const void>(d.in0.data(), s.heads, dim),
                                 heads_view<void>(d.out0.data(), s.heads, dim), ra};
        return [=] { mlarope::rope_backward(c, *st); };
      }
      case BenchOp::kv_split: {
        const KvSplitCall c{heads_view<const void>(d.in0.data(), s.heads, s.k_dim + s.v_dim),
                            heads_view<const void>(d.in1.data(), 1, s.emb_dim),
                            heads_view<void>(d.out0.data(), s.heads, s.k_dim + s.emb_dim),
                            heads_view<void>(d.out1.data(), s.heads, s.v_dim), ka};
        return [=] { mlarope::kv_split(c, *st); };
      }
      case BenchOp::kv_split_backward: {
        const KvSplitBackwardCall c{heads_view<const void>(d.in0.data(), s.heads,
                                                           s.k_dim + s.emb_dim),
                                    heads_view<const void>(d.in1.data(), s.heads, s.v_dim),
                                    heads_view<void>(d.out0.data(), s.heads, s.k_dim + s.v_dim),
                                    heads_view<void>(d.out1.data(), 1, s.emb_dim), ka};
        return [=] { mlarope::kv_split_backward(c, *st); };
      }
    }
    return [] {};
  }

  // Enqueue one measurement: `reps` calls rotating among the sets (or the captured graph).
  void enqueue_measurement(Stream& stream) {
    if (graph) {
      graph->replay(stream);
      return;
    }
    for (int i = 0; i < reps; ++i) calls[i % calls.size()]();
  }
};

// The fixture of the benchmark running now; Google Benchmark calls a benchmark several times
// while it picks the iteration count, so the device data is made once per (op, shape).
std::unique_ptr<Fixture> g_fixture;
std::string g_fixture_key;

Fixture& fixture_for(BenchOp op, const Shape& shape) {
  const std::string key = to_string(op) + "/" + shape_label(shape);
  if (g_fixture && g_fixture_key == key) return *g_fixture;
  g_fixture.reset();  // free the previous benchmark's memory first
  g_fixture_key.clear();
  Stream& stream = *g_stream;
  auto f = std::make_unique<Fixture>(op, shape, stream);
  for (auto& call : f->calls) call();  // validate and warm up every set
  if (g_graph) {
    stream.synchronize();
    stream.begin_capture();
    f->enqueue_measurement(stream);
    f->graph = std::make_unique<Graph>(stream.end_capture());
  }
  f->enqueue_measurement(stream);  // one untimed measurement
  stream.synchronize();
  g_fixture = std::move(f);
  g_fixture_key = key;
  return *g_fixture;
}

// Counters as mlarope_bench; `seconds` is the sum of the iteration times (one call each).
void set_counters(benchmark::State& state, std::int64_t bytes, double seconds) {
  set_floor_counters(state, bytes, seconds, copy_bandwidth());
}

void run_op(benchmark::State& state, BenchOp op, const Shape& shape) {
  try {
    Fixture& f = fixture_for(op, shape);
    Stream& stream = *g_stream;
    EventTimer timer;
    ClockTally clocks;
    double seconds = 0;
    for (auto _ : state) {
      const double per_call =
          timer.seconds(native(stream), [&] { f.enqueue_measurement(stream); }) / f.reps;
      state.SetIterationTime(per_call);
      seconds += per_call;
      clocks.add(g_clocks->sample());
    }
    set_counters(state, minimum_bytes(op, shape), seconds);
    clocks.set_counters(state);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// A device-to-device copy moving the same bytes as `op` (half read, half written), rotating
// among sets that together hold g_rotation_bytes.
void run_copy(benchmark::State& state, BenchOp op, const Shape& shape) {
  try {
    const std::int64_t bytes = minimum_bytes(op, shape);
    const std::size_t half = static_cast<std::size_t>(bytes / 2);
    const int sets = rotation_sets(bytes);
    const int reps = calls_per_measurement(bytes, sets);
    DeviceBuffer src = filled_buffer(sets * half, random_tile(DType::f32));
    DeviceBuffer dst = zero_buffer(sets * half);
    Stream& stream = *g_stream;
    const cudaStream_t cs = native(stream);
    auto measurement = [&] {
      for (int i = 0; i < reps; ++i) {
        const std::size_t offset = (i % sets) * half;
        check(cudaMemcpyAsync(dst.as<char>() + offset, src.as<char>() + offset, half,
                              cudaMemcpyDeviceToDevice, cs),
              "cudaMemcpyAsync");
      }
    };
    measurement();  // warm-up
    stream.synchronize();
    EventTimer timer;
    ClockTally clocks;
    double seconds = 0;
    for (auto _ : state) {
      const double per_call = timer.seconds(cs, measurement) / reps;
      state.SetIterationTime(per_call);
      seconds += per_call;
      clocks.add(g_clocks->sample());
    }
    set_counters(state, bytes, seconds);
    clocks.set_counters(state);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// The value of `--name=value` in argv (not removed), or "" when absent.
std::string flag_value(int argc, char** argv, const std::string& name) {
  const std::string prefix = name + "=";
  std::string value;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind(prefix, 0) == 0) value = argv[i] + prefix.size();
  return value;
}

// A reporter that leaves the "/manual_time" suffix off the names, so that they read
// `op/backend/shape_label` like mlarope_bench's (whose "/real_time" the report drops).
template <class Base>
class PlainNames : public Base {
 public:
  void ReportRuns(const std::vector<benchmark::BenchmarkReporter::Run>& runs) override {
    std::vector<benchmark::BenchmarkReporter::Run> renamed(runs);
    for (auto& run : renamed) run.run_name.time_type.clear();
    Base::ReportRuns(renamed);
  }
};

std::unique_ptr<benchmark::BenchmarkReporter> plain_reporter(const std::string& format) {
  if (format == "json") return std::make_unique<PlainNames<benchmark::JSONReporter>>();
  return nullptr;  // console (the default) and csv (deprecated): Google Benchmark's own
}

}  // namespace

int main(int argc, char** argv) {
  const bool full = take_flag(argc, argv, "--full");
  g_graph = take_flag(argc, argv, "--graph");
  if (take_flag(argc, argv, "--help-mlarope")) {
    std::printf("cuda_bench [--full] [--graph] [Google Benchmark flags]\n"
                "  default: smoke set (T=1K); --full: T 1K..16K, both models, both layouts\n"
                "  --graph: replay each measurement as one CUDA graph\n");
    return 0;
  }
  if (!cuda_device_available()) {
    std::printf("cuda_bench: no CUDA device available, nothing to benchmark\n");
    return 0;
  }
  try {
    g_stream = std::make_unique<Stream>(Stream::cuda());
    int device = 0;
    cudaDeviceProp prop{};
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    benchmark::AddCustomContext("cuda_device", prop.name);
    benchmark::AddCustomContext("cuda_l2_bytes", std::to_string(prop.l2CacheSize));
    g_rotation_bytes = std::max(kMinRotationBytes, 2 * static_cast<std::size_t>(prop.l2CacheSize));
    benchmark::AddCustomContext(
        "cuda_cache_policy",
        "inputs rotate over " + std::to_string(g_rotation_bytes >> 20) + " MiB (" +
            std::to_string(static_cast<double>(g_rotation_bytes) / std::max(1, prop.l2CacheSize)) +
            " x the L2): no call is timed out of cache");
    g_clocks = std::make_unique<ClockMonitor>(device);
    if (g_clocks->available())
      benchmark::AddCustomContext("sm_clock_max_MHz", std::to_string(g_clocks->max_mhz()));
    benchmark::AddCustomContext(
        "clock_monitor", g_clocks->available()
                             ? "NVML: sm_clock_MHz, sm_clock_min_MHz, throttled per benchmark"
                             : "none: " + g_clocks->why_not());
    benchmark::AddCustomContext("cuda_timing",
                                g_graph ? "events, graph replay" : "events, stream launches");
    benchmark::AddCustomContext("copy_GBps", std::to_string(copy_bandwidth() * 1e-9));
    explain_library_build();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }

  const std::vector<BenchOp> ops = {BenchOp::rope, BenchOp::rope_inplace, BenchOp::rope_backward,
                                    BenchOp::kv_split, BenchOp::kv_split_backward};
  for (const Shape& shape : bench_shapes(full))
    for (BenchOp op : ops) {
      const std::string label = to_string(op) + "/cuda/" + shape_label(shape);
      benchmark::RegisterBenchmark(label.c_str(), run_op, op, shape)
          ->Unit(benchmark::kMicrosecond)
          ->UseManualTime();
    }
  for (const Shape& shape : bench_shapes(full))
    for (BenchOp op : {BenchOp::rope, BenchOp::rope_inplace, BenchOp::kv_split}) {
      const std::string label = to_string(op) + "/copy_cuda/" + shape_label(shape);
      benchmark::RegisterBenchmark(label.c_str(), run_copy, op, shape)
          ->Unit(benchmark::kMicrosecond)
          ->UseManualTime();
    }

  // Read before Initialize, which removes the flags it knows from argv.
  const std::string out = flag_value(argc, argv, "--benchmark_out");
  std::string out_format = flag_value(argc, argv, "--benchmark_out_format");
  if (out_format.empty()) out_format = "json";
  std::unique_ptr<benchmark::BenchmarkReporter> display =
      plain_reporter(flag_value(argc, argv, "--benchmark_format"));
  std::unique_ptr<benchmark::BenchmarkReporter> file =
      out.empty() ? nullptr : plain_reporter(out_format);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks(display.get(), file.get());
  benchmark::Shutdown();
  g_fixture.reset();  // device memory and graphs before the stream
  g_stream.reset();
  return 0;
}
