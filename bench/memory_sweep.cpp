// SPDX-License-Identifier: Apache-2.0
// The memory sweep of the timing model (bench/timing_sweep.h): one plain kernel launched at each
// point of sweep_plan (1 to 16 blocks of 128 threads an SM x 1 to 8 16-byte loads in flight
// per thread x a contiguous copy and two in-place patterns, in-place rope's among them), each
// point timed with CUDA events over a batch of launches after a warm-up, on buffers far larger
// than the L2. The driver's occupancy and the kernel's registers go beside each time, so that
// the fit (fit_timing_model --sweep) and the model's occupancy rule can be checked against
// what the device did.
//
//   memory_sweep [--bytes MIB] [--reps N] [--out FILE]
//     --bytes  MiB each launch moves, read and written (default 1024)
//     --reps   launches a point is timed over (default 20)
//     --out    the sweep's JSON (default sweep.json)
//
// Without a CUDA device it prints one line and exits 0.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "memory_sweep_kernels.h"
#include "mlarope/timing.h"
#include "timing_sweep.h"

using namespace mlarope;
using namespace mlarope::bench;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("memory_sweep: ") + what + ": " + cudaGetErrorString(e));
}

/// Times `p` (its grid, registers and occupancy filled in from the driver) over `reps`
/// launches on `a` (the source, or the in-place buffer) and `b` (the copy's destination).
void measure(SweepPoint& p, void* a, void* b, int sms, int reps, cudaStream_t stream) {
  SweepKernel k;
  check(prepare_sweep_kernel(p.loads, p.threads, static_cast<std::size_t>(p.shared_bytes), &k),
        "setting up the kernel");
  if (k.blocks_per_sm < 1) throw std::runtime_error("memory_sweep: a point fits no block on an SM");
  p.registers = k.registers;
  p.blocks_per_sm = k.blocks_per_sm;
  p.blocks = static_cast<std::int64_t>(k.blocks_per_sm) * sms;
  const auto launch = [&] {
    launch_sweep_kernel(p.loads, static_cast<unsigned>(p.blocks), p.threads,
                        static_cast<std::size_t>(p.shared_bytes), stream, a, p.in_place ? a : b,
                        static_cast<std::uint32_t>(p.vectors),
                        static_cast<std::uint32_t>(p.run / 16),
                        static_cast<std::uint32_t>(p.stride / 16));
  };
  for (int i = 0; i < 2; ++i) launch();  // warm-up
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  check(cudaEventRecord(start, stream), "event record");
  for (int i = 0; i < reps; ++i) launch();
  check(cudaEventRecord(stop, stream), "event record");
  check(cudaEventSynchronize(stop), "synchronize");
  check(cudaGetLastError(), "launch");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "elapsed time");
  p.seconds = ms * 1e-3 / reps;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t mib = 1024;
  int reps = 20;
  std::string out = "sweep.json";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--bytes") && i + 1 < argc) mib = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else {
      std::fprintf(stderr, "usage: memory_sweep [--bytes MIB] [--reps N] [--out FILE]\n");
      return 2;
    }
  }
  if (mib < 1 || reps < 1) {
    std::fprintf(stderr, "memory_sweep: --bytes and --reps must be positive\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("memory_sweep: no CUDA device available, nothing to sweep\n");
    return 0;
  }
  try {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "device properties");
    const DeviceProfile profile = device_profile("h200");
    DeviceProfile largest_carveout = profile;  // what the sweep asks for (measure)
    largest_carveout.shared_carveout_bytes = profile.shared_bytes_per_sm;
    std::vector<SweepPoint> points = sweep_plan(profile, mib << 20);
    // The largest buffer: in place, the pattern's span (stride / run of the bytes read).
    std::size_t span = static_cast<std::size_t>(mib << 20) / 2;
    for (const SweepPoint& p : points)
      if (p.in_place)
        span = std::max(span, static_cast<std::size_t>(p.vectors / (p.run / 16) + 1) *
                                  static_cast<std::size_t>(p.stride));
    if (span / 16 + static_cast<std::size_t>(8) * 16 * 128 * prop.multiProcessorCount >=
        (std::size_t{1} << 32))
      throw std::runtime_error("memory_sweep: --bytes too large for the kernel's 32-bit indices");
    void *a = nullptr, *b = nullptr;
    check(cudaMalloc(&a, span), "allocating the source");
    check(cudaMalloc(&b, static_cast<std::size_t>(mib << 20) / 2), "allocating the destination");
    check(cudaMemset(a, 1, span), "memset");
    cudaStream_t stream;
    check(cudaStreamCreate(&stream), "stream");
    std::printf("memory_sweep: %s, %d SMs, %zu points of %lld MiB each\n", prop.name,
                prop.multiProcessorCount, points.size(), static_cast<long long>(mib));
    for (SweepPoint& p : points) {
      const int target = p.blocks_per_sm;
      measure(p, a, b, prop.multiProcessorCount, reps, stream);
      const Occupancy model = occupancy(largest_carveout, p.threads, p.registers, p.shared_bytes);
      std::printf("%-8s run %3lld / %3lld  loads %d  blocks/SM %2d (asked %2d, model %2d)  "
                  "%3d registers  %8.1f us  %7.1f GB/s\n",
                  p.in_place ? "in place" : "copy", static_cast<long long>(p.run),
                  static_cast<long long>(p.stride), p.loads, p.blocks_per_sm, target,
                  model.blocks_per_sm, p.registers, p.seconds * 1e6,
                  2.0 * static_cast<double>(p.vectors) * 16 / p.seconds * 1e-9);
      std::fflush(stdout);
    }
    std::ofstream(out) << sweep_json(points, prop.name);
    std::printf("memory_sweep: %s\n", out.c_str());
    cudaFree(a);
    cudaFree(b);
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
