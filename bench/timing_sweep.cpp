// SPDX-License-Identifier: Apache-2.0
#include "timing_sweep.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "mlarope/error.h"

namespace mlarope::bench {
namespace {

constexpr std::int64_t kVector = 16;   // bytes a load or store moves
constexpr std::int64_t kSector = 32;   // the GPU model's sector
constexpr std::int64_t kChunk = 1024;  // the GPU model's DRAM chunk (ModelLaunchStats)

// Sector bytes and distinct chunks of runs of `run` bytes every `stride` bytes from address 0,
// `bytes` in all: the in-place pattern (runs start on a sector, as the rope slices do).
void pattern_chunks(std::int64_t run, std::int64_t stride, std::int64_t bytes,
                    std::int64_t* touched, std::int64_t* chunks) {
  const auto sectors = [](std::int64_t length) { return (length + kSector - 1) / kSector; };
  const std::int64_t runs = bytes / run, last = bytes % run;  // whole runs, then a part
  *touched = (runs * sectors(run) + sectors(last)) * kSector;
  const std::int64_t end = (last > 0 ? runs * stride + last : (runs - 1) * stride + run);
  if (stride - run < kChunk) {  // no chunk between runs is skipped
    *chunks = (end - 1) / kChunk + 1;
    return;
  }
  *chunks = 0;
  for (std::int64_t start = 0, last_chunk = -1; start < end; start += stride) {
    const std::int64_t length = std::min(run, end - start);
    for (std::int64_t c = start / kChunk; c <= (start + length - 1) / kChunk; ++c)
      if (c > last_chunk) ++*chunks, last_chunk = c;
  }
}

}  // namespace

std::vector<SweepPoint> parse_sweep(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("sweep: not valid JSON: ") + e.what());
  }
  if (!j.contains("points") || !j["points"].is_array()) throw Error("sweep: no \"points\" array");
  std::vector<SweepPoint> points;
  for (const nlohmann::json& q : j["points"]) {
    const auto need = [&](const char* key) -> const nlohmann::json& {
      if (!q.contains(key) || !q[key].is_number())
        throw Error(std::string("sweep: a point's \"") + key + "\" is missing or not a number");
      return q[key];
    };
    if (!q.contains("pattern") || !q["pattern"].is_string())
      throw Error("sweep: a point's \"pattern\" is missing");
    SweepPoint p;
    const std::string pattern = q["pattern"];
    if (pattern != "copy" && pattern != "in_place")
      throw Error("sweep: pattern '" + pattern + "' is neither copy nor in_place");
    p.in_place = pattern == "in_place";
    p.run = need("run").get<std::int64_t>();
    p.stride = need("stride").get<std::int64_t>();
    p.loads = need("loads").get<int>();
    p.threads = need("threads").get<int>();
    p.blocks = need("blocks").get<std::int64_t>();
    p.vectors = need("vectors").get<std::int64_t>();
    p.registers = need("registers").get<int>();
    p.shared_bytes = need("shared_bytes").get<std::int64_t>();
    p.blocks_per_sm = q.value("blocks_per_sm", 0);
    p.seconds = q.value("seconds", 0.0);
    if (p.run <= 0 || p.run % kVector != 0 || p.stride < p.run || p.loads < 1 || p.threads < 1 ||
        p.blocks < 1 || p.vectors < 1)
      throw Error(
          "sweep: a point's run, stride, loads, threads, blocks or vectors is out of range");
    points.push_back(p);
  }
  return points;
}

std::string sweep_json(const std::vector<SweepPoint>& points, const std::string& device) {
  nlohmann::json j = {{"device", device}, {"points", nlohmann::json::array()}};
  for (const SweepPoint& p : points)
    j["points"].push_back({{"pattern", p.in_place ? "in_place" : "copy"},
                           {"run", p.run},
                           {"stride", p.stride},
                           {"loads", p.loads},
                           {"threads", p.threads},
                           {"blocks", p.blocks},
                           {"vectors", p.vectors},
                           {"registers", p.registers},
                           {"shared_bytes", p.shared_bytes},
                           {"blocks_per_sm", p.blocks_per_sm},
                           {"seconds", p.seconds}});
  return j.dump(1) + "\n";
}

ModelLaunchStats sweep_stats(const SweepPoint& p) {
  ModelLaunchStats s;
  s.kernel = "sweep";
  s.blocks = s.blocks_observed = s.blocks_run = p.blocks;
  s.threads = p.threads;
  // Thread t moves vectors t, t + P, t + 2P, ... (P threads in all), kLoads a batch: the
  // busiest thread of a block has ceil(vectors / P) of them.
  const std::int64_t threads = p.blocks * p.threads;
  const std::int64_t per_thread = (p.vectors + threads - 1) / threads;
  s.round_trips = p.blocks * ((per_thread + p.loads - 1) / p.loads);
  s.load_phases = p.blocks;
  s.loaded_bytes = s.stored_bytes = p.vectors * kVector;
  s.load_batches = threads * ((per_thread + p.loads - 1) / p.loads);
  s.dram_bytes = 2 * p.vectors * kVector;
  if (p.in_place) {  // the same sectors read, then written
    pattern_chunks(p.run, p.stride, p.vectors * kVector, &s.touched_bytes, &s.dram_chunks);
  } else {  // two contiguous regions of vectors x 16 bytes
    s.touched_bytes = 2 * p.vectors * kVector;
    s.dram_chunks = 2 * ((p.vectors * kVector + kChunk - 1) / kChunk);
  }
  return s;
}

KernelResource sweep_resource(const SweepPoint& p) {
  KernelResource k;
  k.kernel = "sweep";
  k.arch = "sm_90";
  k.registers = p.registers;
  k.smem = p.shared_bytes;
  return k;
}

double predict_sweep_seconds(const SweepPoint& p, const DeviceProfile& device) {
  DeviceProfile d = device;
  d.shared_carveout_bytes = d.shared_bytes_per_sm;  // the sweep asks for the largest carveout
  return predict_time(sweep_stats(p), sweep_resource(p), d, 2 * p.vectors * kVector).seconds;
}

std::vector<SweepPoint> sweep_plan(const DeviceProfile& d, std::int64_t bytes) {
  struct Pattern {
    bool in_place;
    std::int64_t run, stride;
  };
  // Contiguous; in-place rope's slice (64 of 192 elements); two thirds of each stride.
  const Pattern patterns[] = {{false, 16, 16}, {true, 128, 384}, {true, 256, 384}};
  std::vector<SweepPoint> points;
  for (const Pattern& pattern : patterns)
    for (int per_sm : {1, 2, 4, 8, 16})
      for (int loads : {1, 2, 4, 8}) {
        SweepPoint p;
        p.in_place = pattern.in_place;
        p.run = pattern.run, p.stride = pattern.stride;
        p.loads = loads;
        p.vectors = bytes / 2 / kVector;
        // Dynamic shared memory that leaves room for per_sm blocks and no more.
        p.shared_bytes = d.shared_bytes_per_sm / per_sm - d.shared_bytes_reserved_per_block;
        p.registers = 32;  // the device's figure replaces it
        p.blocks_per_sm = per_sm;
        p.blocks = static_cast<std::int64_t>(per_sm) * d.sms;
        points.push_back(p);
      }
  return points;
}

}  // namespace mlarope::bench
