// Google Benchmark of every op on every host-memory backend (reference, host) at realistic
// shapes, with the minimum traffic of each op, GB/s, and the fraction of the copy bandwidth
// measured in the same run. `--full` runs the full set (T 1K..16K); the default is a smoke set.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/case_run.h"
#include "backends/device_backend.h"
#include "mlarope/host_convert.h"
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
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(seconds.begin(), seconds.end());
    return 2.0 * bytes / seconds[seconds.size() / 2];
  }();
  return bandwidth;
}

// Allocations aligned like cudaMalloc's (256 bytes), so that where 32-byte sectors fall in the
// buffers, and so the GPU model's figures, do not depend on the host allocator.
template <class T>
struct Aligned256 {
  using value_type = T;
  Aligned256() = default;
  template <class U>
  Aligned256(const Aligned256<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(256))); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t(256)); }
  template <class U>
  bool operator==(const Aligned256<U>&) const { return true; }
  template <class U>
  bool operator!=(const Aligned256<U>&) const { return false; }
};
template <class T>
using DeviceLikeVector = std::vector<T, Aligned256<T>>;
using Bytes = DeviceLikeVector<std::byte>;

// `count` random values in [-1, 1]: a tile of 64 Ki values repeated (filling is not timed,
// but it runs for every shape, so it must be quick).
Bytes random_bytes(std::int64_t count, DType dtype, std::uint32_t seed) {
  constexpr std::int64_t kTile = 1 << 16;
  const std::size_t size = dtype_size(dtype);
  std::vector<std::byte> tile(kTile * size);
  Bytes v(count * size);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  for (std::int64_t i = 0; i < kTile; ++i) store_rounded(tile.data(), dtype, i, dist(rng));
  for (std::int64_t i = 0; i < count; i += kTile)
    std::memcpy(v.data() + i * size, tile.data(), std::min(kTile, count - i) * size);
  return v;
}

// Buffers and call descriptors of one benchmark.
struct Fixture {
  Shape s;
  Bytes a, b, k_pe, out2;
  DeviceLikeVector<float> cos, sin;
  DeviceLikeVector<std::int32_t> cu;

  explicit Fixture(const Shape& shape) : s(shape), cu(shape.cu_seqlens.begin(), shape.cu_seqlens.end()) {
    const std::int64_t rows = s.tokens, table_rows = s.tokens;
    a = random_bytes(rows * s.heads * (s.nope_dim + s.emb_dim + s.k_dim + s.v_dim), s.dtype, 1);
    b = random_bytes(rows * s.heads * (s.nope_dim + s.emb_dim + s.k_dim + s.v_dim), s.dtype, 2);
    k_pe = random_bytes(rows * s.emb_dim, s.dtype, 3);
    out2 = random_bytes(rows * s.heads * s.v_dim, s.dtype, 4);
    cos.resize(table_rows * s.emb_dim);
    sin.resize(table_rows * s.emb_dim);
    for (std::int64_t p = 0; p < table_rows; ++p)
      for (std::int64_t k = 0; k < s.emb_dim; ++k) {
        const double angle = p * std::pow(10000.0, -2.0 * (k % (s.emb_dim / 2)) / s.emb_dim);
        cos[p * s.emb_dim + k] = static_cast<float>(std::cos(angle));
        sin[p * s.emb_dim + k] = static_cast<float>(std::sin(angle));
      }
  }

  template <class Void>
  BasicTensorView<Void> heads_view(Void* data, std::int64_t heads, std::int64_t width) const {
    if (s.layout == TokenLayout::sbhd) return contiguous_view<Void>(data, s.dtype, {s.tokens, 1, heads, width});
    return contiguous_view<Void>(data, s.dtype, {s.tokens, heads, width});
  }

  Rotation rotation() const {
    Rotation r;  // Megatron's MLA mode
    r.cos = contiguous_view<const void>(cos.data(), DType::f32, {s.tokens, s.emb_dim});
    r.sin = contiguous_view<const void>(sin.data(), DType::f32, {s.tokens, s.emb_dim});
    return r;
  }

  Positions positions() const {
    Positions p;
    p.layout = s.layout;
    if (s.layout == TokenLayout::thd) {
      p.cu_seqlens = {cu.data(), IndexType::i32, static_cast<std::int64_t>(cu.size())};
      p.max_seqlen = s.tokens;
    }
    return p;
  }

  RopeArgs rope_args() const { return {s.nope_dim, s.emb_dim, rotation(), positions(), nullptr}; }
  KvSplitArgs kv_args() const {
    return {s.k_dim, s.v_dim, s.emb_dim, rotation(), positions(), nullptr};
  }
};

// The call of `op`, made once and then run in the timing loop.
std::function<void()> make_call(BenchOp op, Fixture& f, const harness::Backend& backend) {
  const Shape& s = f.s;
  const std::int64_t d = s.nope_dim + s.emb_dim;
  switch (op) {
    case BenchOp::rope: {
      const RopeCall c{f.heads_view<const void>(f.a.data(), s.heads, d), f.heads_view<void>(f.b.data(), s.heads, d), f.rope_args()};
      return [=] { backend.rope(c); };
    }
    case BenchOp::rope_inplace: {
      const RopeInplaceCall c{f.heads_view<void>(f.a.data(), s.heads, d), f.rope_args()};
      return [=] { backend.rope_inplace(c); };
    }
    case BenchOp::rope_backward: {
      const RopeBackwardCall c{f.heads_view<const void>(f.a.data(), s.heads, d), f.heads_view<void>(f.b.data(), s.heads, d), f.rope_args()};
      return [=] { backend.rope_backward(c); };
    }
    case BenchOp::kv_split: {
      const KvSplitCall c{f.heads_view<const void>(f.a.data(), s.heads, s.k_dim + s.v_dim),
                          f.heads_view<const void>(f.k_pe.data(), 1, s.emb_dim),
                          f.heads_view<void>(f.b.data(), s.heads, s.k_dim + s.emb_dim),
                          f.heads_view<void>(f.out2.data(), s.heads, s.v_dim), f.kv_args()};
      return [=] { backend.kv_split(c); };
    }
    case BenchOp::kv_split_backward: {
      const KvSplitBackwardCall c{f.heads_view<const void>(f.a.data(), s.heads, s.k_dim + s.emb_dim),
                                  f.heads_view<const void>(f.out2.data(), s.heads, s.v_dim),
                                  f.heads_view<void>(f.b.data(), s.heads, s.k_dim + s.v_dim),
                                  f.heads_view<void>(f.k_pe.data(), 1, s.emb_dim), f.kv_args()};
      return [=] { backend.kv_split_backward(c); };
    }
  }
  return [] {};
}

// Counters: minimum bytes, achieved GB/s, the copy bandwidth of this run, and the fraction of
// the floor (bytes / copy bandwidth) over the time taken.
void set_counters(benchmark::State& state, std::int64_t bytes, double seconds) {
  state.SetBytesProcessed(state.iterations() * bytes);
  const double achieved = seconds > 0 ? static_cast<double>(bytes) * state.iterations() / seconds : 0;
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["GBps"] = achieved * 1e-9;
  state.counters["copy_GBps"] = copy_bandwidth() * 1e-9;
  state.counters["floor_fraction"] = achieved / copy_bandwidth();
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
int rotation_sets(std::int64_t bytes) {
  constexpr std::int64_t kBeyondCache = 64ll << 20;
  return static_cast<int>(std::max<std::int64_t>(1, (kBeyondCache + bytes - 1) / bytes));
}

// The input sets of a shape, kept while consecutive benchmarks use the same shape (Google
// Benchmark calls a benchmark function several times, and the ops of a shape run in a row).
std::vector<std::unique_ptr<Fixture>>& fixtures_for(const Shape& shape, int sets) {
  static std::string key;
  static std::vector<std::unique_ptr<Fixture>> fixtures;
  const std::string wanted = shape_label(shape);
  if (key != wanted) fixtures.clear(), key = wanted;  // free the previous shape's memory first
  while (static_cast<int>(fixtures.size()) < sets) fixtures.push_back(std::make_unique<Fixture>(shape));
  return fixtures;
}

// The host backend's GPU model on `op` at `shape` cut to 16 tokens (the per-row access pattern
// is the same at any length; the model checks and counts every access, so it is slow): the
// sector efficiency of the launches and their predicted DRAM bytes over the op's minimum.
// Computed once per (op, shape).
std::pair<double, double> model_figures(BenchOp op, const Shape& shape) {
  static std::map<std::string, std::pair<double, double>> cache;
  const std::string key = to_string(op) + "/" + shape_label(shape);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  Shape small = shape;
  small.tokens = 16;
  if (small.layout == TokenLayout::thd) small.cu_seqlens = mixed_cu_seqlens(small.tokens);
  Fixture fixture(small);
  const harness::Backend model = harness::host_backend(0, harness::HostMode::gpu_model);
  make_call(op, fixture, model)();
  ModelLaunchStats total;
  for (const ModelLaunchStats& s : model.take_model_stats()) {
    total.useful_bytes += s.useful_bytes;
    total.warp_sector_bytes += s.warp_sector_bytes;
    total.dram_bytes += s.dram_bytes;
  }
  const auto figures = std::make_pair(
      total.sector_efficiency(), static_cast<double>(total.dram_bytes) / static_cast<double>(minimum_bytes(op, small)));
  return cache[key] = figures;
}

void run_op(benchmark::State& state, BenchOp op, Shape shape, harness::Backend backend) {
  const std::int64_t bytes = minimum_bytes(op, shape);
  const int sets = rotation_sets(bytes);
  std::vector<std::unique_ptr<Fixture>>& fixtures = fixtures_for(shape, sets);
  std::vector<std::function<void()>> calls;
  for (int i = 0; i < sets; ++i) calls.push_back(make_call(op, *fixtures[i], backend));
  try {
    for (auto& call : calls) call();  // warm-up
  } catch (const harness::Unsupported& e) {  // a plugin declining the shape: shown, not timed
    state.SkipWithError((std::string("not supported: ") + e.what()).c_str());
    return;
  }
  copy_bandwidth();
  std::size_t next = 0;
  const double seconds = timed_loop(state, [&] { calls[next++ % calls.size()](); });
  set_counters(state, bytes, seconds);
  if (backend.name == "host") {  // what the same kernels would do on a GPU, by the model
    const auto [efficiency, dram_fraction] = model_figures(op, shape);
    state.counters["model_sector_efficiency"] = efficiency;
    state.counters["model_dram_fraction"] = dram_fraction;
  }
}

// A plain parallel copy moving the same bytes as `op` (half read, half written).
void run_copy(benchmark::State& state, BenchOp op, Shape shape) {
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
}

// rope_inplace's access pattern with next to no arithmetic: each head's rope slice (a short
// run, one head stride from the next) read and written back in place, 8 bytes at a time (each
// word plus 1), rows split over the cores. Its floor_fraction is the most this pattern allows on
// the machine, below the copy's: the other bytes of each head's cache lines travel too.
void strided_touch(char* base, const Shape& s) {
  const std::size_t e = dtype_size(s.dtype);
  const std::size_t head = static_cast<std::size_t>(s.nope_dim + s.emb_dim) * e;
  const std::size_t nope = static_cast<std::size_t>(s.nope_dim) * e, slice = static_cast<std::size_t>(s.emb_dim) * e;
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
  const std::size_t tensor = static_cast<std::size_t>(shape.tokens * shape.heads * (shape.nope_dim + shape.emb_dim)) *
                             dtype_size(shape.dtype);
  const int sets = rotation_sets(bytes);
  std::vector<char> buffer(sets * tensor, 1);
  copy_bandwidth();
  std::int64_t next = 0;
  const double seconds = timed_loop(state, [&] { strided_touch(buffer.data() + (next++ % sets) * tensor, shape); });
  set_counters(state, bytes, seconds);
}

bool take_flag(int& argc, char** argv, const std::string& flag) {
  for (int i = 1; i < argc; ++i)
    if (argv[i] == flag) {
      std::copy(argv + i + 1, argv + argc, argv + i);
      --argc;
      return true;
    }
  return false;
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
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '.' && ch != ':' && ch != '-') ch = '_';
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  const bool full = take_flag(argc, argv, "--full");
  const std::string plugin = take_value(argc, argv, "--backend");
  if (take_flag(argc, argv, "--help-mlarope")) {
    std::printf("mlarope_bench [--full] [--backend=plugin:PATH.so] [Google Benchmark flags]\n"
                "  default: smoke set (T=1K); --full: T 1K..16K, both models, both layouts\n"
                "  --backend=plugin:PATH.so: also time a kernel plugin (include/mlarope/plugin.h)\n");
    return 0;
  }
  std::vector<harness::Backend> backends;
  for (const std::string& name : harness::backend_names())
    if (name == "host") {  // the fast mode (the GPU model is for the checks), labelled "host"
      harness::Backend fast = harness::host_backend(0, harness::HostMode::fast);
      fast.name = "host";
      backends.push_back(fast);
    } else if (name != "cuda") {  // CUDA: cuda_bench
      backends.push_back(harness::find_backend(name));
    }
  if (!plugin.empty()) {
    if (plugin.rfind("plugin:", 0) != 0) {
      std::fprintf(stderr, "mlarope_bench: --backend takes plugin:PATH.so (the built-in backends always run)\n");
      return 2;
    }
    try {
      backends.push_back(harness::find_backend(plugin));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mlarope_bench: error: %s\n", e.what());
      return 2;
    }
    backends.back().name = label_name(backends.back().name);
  }
  for (const Shape& shape : bench_shapes(full))  // shape outermost: its buffers are made once
    for (const harness::Backend& backend : backends)
      for (BenchOp op : {BenchOp::rope, BenchOp::rope_inplace, BenchOp::rope_backward,
                         BenchOp::kv_split, BenchOp::kv_split_backward}) {
        const std::string label = to_string(op) + "/" + backend.name + "/" + shape_label(shape);
        benchmark::RegisterBenchmark(label.c_str(), run_op, op, shape, backend)
            ->Unit(benchmark::kMillisecond)->UseRealTime();
      }
  for (const Shape& shape : bench_shapes(full))
    for (BenchOp op : {BenchOp::rope, BenchOp::rope_inplace, BenchOp::kv_split}) {
      const std::string label = to_string(op) + "/copy/" + shape_label(shape);
      benchmark::RegisterBenchmark(label.c_str(), run_copy, op, shape)
          ->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  for (const Shape& shape : bench_shapes(full)) {
    const std::string label = "rope_inplace/strided_floor/" + shape_label(shape);
    benchmark::RegisterBenchmark(label.c_str(), run_strided_floor, shape)
        ->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
