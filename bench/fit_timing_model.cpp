// SPDX-License-Identifier: Apache-2.0
// Fits the timing model's fitted constants of a device profile (bench/timing_fit.h) to the
// measured calibration rows and, with --sweep, to a memory sweep a device ran
// (bench/memory_sweep.cu, ci/gpu-check.sh): the largest relative error over every prediction,
// then the median. Prints the fit, every row and the sweep's worst points; with --write,
// replaces the constants in the profile file (its other fields, and the file's layout, are
// kept).
//
//   fit_timing_model [--devices DIR] [--carveout KIB] [--sweep FILE] [--hold NAME=VALUE]...
//                    [--write]
//     DIR: cuda/host/devices of the source tree; --carveout: fit with this carveout only;
//     --sweep: memory_sweep's JSON, fitted together with the rows; --hold: keep a fitted
//     constant (dram_latency, latency_load_factor, l2_latency, launch_overhead, copy_overhead,
//     dram_density_exponent, phase_tail; seconds for times) at VALUE
//   fit_timing_model --record [--devices DIR]
//     run this build's kernels under the GPU model and record their figures in the calibration
//     rows: only while the kernels are the ones the rows measured
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlarope/timing.h"
#include "timing_calibration.h"
#include "timing_fit.h"
#include "timing_sweep.h"

using namespace mlarope;
using namespace mlarope::bench;

namespace {

std::string g(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

// NAME=VALUE of --hold into `options`; false (after saying why) where it is not one.
bool held_constant(const std::string& text, FitOptions& options) {
  const std::size_t eq = text.find('=');
  char* end = nullptr;
  const double value = eq == std::string::npos ? 0 : std::strtod(text.c_str() + eq + 1, &end);
  if (eq == std::string::npos || eq == 0 || end == text.c_str() + eq + 1 || *end != '\0') {
    std::fprintf(stderr, "fit_timing_model: --hold wants NAME=VALUE, not '%s'\n", text.c_str());
    return false;
  }
  options.held.emplace_back(text.substr(0, eq), value);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string devices = std::string(MLAROPE_SOURCE_DIR) + "/cuda/host/devices", sweep_file;
  bool write = false, record = false;
  FitOptions options;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--write")) write = true;
    else if (!std::strcmp(argv[i], "--record")) record = true;
    else if (!std::strcmp(argv[i], "--devices") && i + 1 < argc) devices = argv[++i];
    else if (!std::strcmp(argv[i], "--sweep") && i + 1 < argc) sweep_file = argv[++i];
    else if (!std::strcmp(argv[i], "--carveout") && i + 1 < argc)
      options.carveouts_kib = {std::atoi(argv[++i])};
    else if (!std::strcmp(argv[i], "--hold") && i + 1 < argc && held_constant(argv[++i], options))
      continue;
    else {
      std::fprintf(stderr,
                   "usage: fit_timing_model [--devices DIR] [--carveout KIB] [--sweep FILE] "
                   "[--hold NAME=VALUE]... [--write] | --record\n");
      return 2;
    }
  }
  try {
    if (record) {
      record_calibration_model(devices);
      std::printf(
          "recorded the model's figures of this build's kernels in %s/h200.calibration.json\n",
          devices.c_str());
      return 0;
    }
    const std::vector<CalibrationRow> rows = calibration_rows(devices);
    std::vector<SweepPoint> sweep;
    if (!sweep_file.empty()) {
      std::ifstream in(sweep_file);
      if (!in) throw std::runtime_error(sweep_file + ": cannot read");
      std::stringstream text;
      text << in.rdbuf();
      sweep = parse_sweep(text.str());
    }
    const DeviceProfile best = fit_device_profile(rows, sweep, device_profile("h200"), options);
    const FitErrors e = fit_errors(rows, sweep, best);
    std::printf(
        "fit: shared_carveout_bytes %d, dram_latency %s s, latency_load_factor %s, l2_latency %s "
        "s, "
        "launch_overhead %s s, copy_overhead %s s, dram_density_exponent %s, phase_tail %s s\n",
        best.shared_carveout_bytes, g(best.dram_latency).c_str(),
        g(best.latency_load_factor).c_str(), g(best.l2_latency).c_str(),
        g(best.launch_overhead).c_str(), g(best.copy_overhead).c_str(),
        g(best.dram_density_exponent).c_str(), g(best.phase_tail).c_str());
    std::printf("errors: median %.1f%%, largest %.1f%%\n", 100 * e.median, 100 * e.largest);
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::printf("  %-18s %-22s measured %7.1f us, predicted %7.1f us (%+.1f%%)\n",
                  rows[i].op.c_str(), rows[i].shape.c_str(), rows[i].seconds * 1e6,
                  predict_time(rows[i].stats, rows[i].kernel, best, rows[i].bytes).seconds * 1e6,
                  100 * (predict_time(rows[i].stats, rows[i].kernel, best, rows[i].bytes).seconds /
                             rows[i].seconds -
                         1));
    if (!sweep.empty()) {  // the model's occupancy rule against the driver's, per point
      DeviceProfile largest_carveout = best;  // what memory_sweep asks for
      largest_carveout.shared_carveout_bytes = best.shared_bytes_per_sm;
      int agree = 0;
      for (const SweepPoint& p : sweep) {
        const Occupancy o = occupancy(largest_carveout, p.threads, p.registers, p.shared_bytes);
        if (o.blocks_per_sm == p.blocks_per_sm) ++agree;
        else
          std::printf("occupancy: %d registers, %lld bytes of shared memory: the driver %d "
                      "blocks/SM, the model %d (%s)\n",
                      p.registers, static_cast<long long>(p.shared_bytes), p.blocks_per_sm,
                      o.blocks_per_sm, o.limit.c_str());
      }
      std::printf("occupancy: the model agrees with the driver on %d of %zu sweep points\n", agree,
                  sweep.size());
    }
    if (!sweep.empty()) {  // the sweep's five worst points
      std::vector<std::size_t> order(sweep.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(),
                [&](std::size_t a, std::size_t b) { return e.sweep[a] > e.sweep[b]; });
      std::printf("sweep: %zu points; the worst:\n", sweep.size());
      for (std::size_t k = 0; k < std::min<std::size_t>(5, order.size()); ++k) {
        const SweepPoint& p = sweep[order[k]];
        std::printf("  %-8s run %4lld / %4lld, %d loads, %d blocks/SM: measured %8.1f us, "
                    "predicted %8.1f us (%+.1f%%)\n",
                    p.in_place ? "in place" : "copy", static_cast<long long>(p.run),
                    static_cast<long long>(p.stride), p.loads, p.blocks_per_sm, p.seconds * 1e6,
                    predict_sweep_seconds(p, best) * 1e6,
                    100 * (predict_sweep_seconds(p, best) / p.seconds - 1));
      }
    }
    if (write) {
      const std::string path = devices + "/h200.json";
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      std::string json = text.str();
      const auto set = [&](const char* key, const std::string& value) {  // the value after "key":
        const std::string field = std::string("\"") + key + "\": ";
        const std::size_t at = json.find(field);
        if (at == std::string::npos) throw std::runtime_error(path + ": no field " + key);
        const std::size_t begin = at + field.size(), end = json.find_first_of(",\n", begin);
        json.replace(begin, end - begin, value);
      };
      set("shared_carveout_bytes", std::to_string(best.shared_carveout_bytes));
      set("dram_latency", g(best.dram_latency));
      set("latency_load_factor", g(best.latency_load_factor));
      set("l2_latency", g(best.l2_latency));
      set("launch_overhead", g(best.launch_overhead));
      set("copy_overhead", g(best.copy_overhead));
      set("dram_density_exponent", g(best.dram_density_exponent));
      set("phase_tail", g(best.phase_tail));
      parse_device_profile(json);  // still a profile
      std::ofstream(path) << json;
      std::printf("wrote %s\n", path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fit_timing_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
