// SPDX-License-Identifier: Apache-2.0
// Fits the timing model's fitted constants of a device profile (the latencies, the load
// factor, the overheads, the density exponent, the phase tail, the shared-memory carveout) to
// the measured calibration rows, minimising the largest relative error over the rows' times
// and copies, then the median: for each carveout the driver can configure on sm_90, a seeded
// random search over plausible ranges, then a coordinate descent from the best point. Prints
// the fit and every row; with --write, replaces the constants in the profile file (its other
// fields, and the file's layout, are kept).
//
//   fit_timing_model [--devices DIR] [--carveout KIB] [--write]
//     DIR: cuda/host/devices of the source tree; --carveout: fit with this carveout only
//   fit_timing_model --record [--devices DIR]
//     run this build's kernels under the GPU model and record their figures in the calibration
//     rows: only while the kernels are the ones the rows measured
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlarope/timing.h"
#include "timing_calibration.h"

using namespace mlarope;
using namespace mlarope::bench;

namespace {

// The objective: the largest error first, the median to break ties.
double score(const std::vector<CalibrationRow>& rows, const DeviceProfile& d) {
  const CalibrationErrors e = calibration_errors(rows, d);
  return e.largest + 1e-3 * e.median;
}

// A fitted constant and its plausible range (the search's; the descent stays inside it).
struct Parameter {
  const char* name;
  double DeviceProfile::*field;
  double lo, hi;
};

const Parameter kParameters[] = {
    {"dram_latency", &DeviceProfile::dram_latency, 300e-9, 1200e-9},  // idle HBM: about 550 ns
    {"latency_load_factor", &DeviceProfile::latency_load_factor, 0.0, 3.0},
    {"l2_latency", &DeviceProfile::l2_latency, 50e-9, 500e-9},
    {"launch_overhead", &DeviceProfile::launch_overhead, 1e-6, 10e-6},
    {"copy_overhead", &DeviceProfile::copy_overhead, 1e-6, 10e-6},
    {"dram_density_exponent", &DeviceProfile::dram_density_exponent, 0.0, 2.5},
    {"phase_tail", &DeviceProfile::phase_tail, 0.0, 4e-6},
};

// A random point of the ranges (log-uniform for the latencies, uniform for the rest).
DeviceProfile random_point(DeviceProfile d, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  for (const Parameter& p : kParameters) {
    const bool log_scale = p.lo > 0 && p.hi / p.lo > 5;
    d.*p.field = log_scale ? p.lo * std::pow(p.hi / p.lo, u(rng)) : p.lo + (p.hi - p.lo) * u(rng);
  }
  return d;
}

// Coordinate descent with shrinking steps from `d`.
DeviceProfile descend(const std::vector<CalibrationRow>& rows, DeviceProfile d) {
  double best = score(rows, d);
  for (double step = 0.25; step > 1e-4; step /= 2)
    for (bool improved = true; improved;) {
      improved = false;
      for (const Parameter& p : kParameters)
        for (const double direction : {1.0, -1.0}) {
          DeviceProfile t = d;
          const double scale = d.*p.field != 0 ? d.*p.field : (p.hi - p.lo) / 4;
          t.*p.field = std::min(p.hi, std::max(p.lo, d.*p.field + direction * step * scale));
          const double s = score(rows, t);
          if (s < best - 1e-12) best = s, d = t, improved = true;
        }
    }
  return d;
}

std::string g(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string devices = std::string(MLAROPE_SOURCE_DIR) + "/cuda/host/devices";
  bool write = false, record = false;
  std::vector<int> carveouts = {8, 16, 32, 64, 100, 132, 164, 196, 228};  // sm_90's, KiB
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--write")) write = true;
    else if (!std::strcmp(argv[i], "--record")) record = true;
    else if (!std::strcmp(argv[i], "--devices") && i + 1 < argc) devices = argv[++i];
    else if (!std::strcmp(argv[i], "--carveout") && i + 1 < argc)
      carveouts = {std::atoi(argv[++i])};
    else {
      std::fprintf(
          stderr,
          "usage: fit_timing_model [--devices DIR] [--carveout KIB] [--write] | --record\n");
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
    const DeviceProfile start = device_profile("h200");
    DeviceProfile best = start;
    double best_score = score(rows, start);
    std::mt19937 rng(20261205);
    for (const int kib : carveouts) {
      DeviceProfile best_here = start;
      best_here.shared_carveout_bytes = kib * 1024;
      double here = score(rows, best_here);
      for (int i = 0; i < 20000; ++i) {
        const DeviceProfile d = random_point(best_here, rng);
        const double s = score(rows, d);
        if (s < here) here = s, best_here = d;
      }
      best_here = descend(rows, best_here);
      if (score(rows, best_here) < best_score)
        best_score = score(rows, best_here), best = best_here;
    }
    const CalibrationErrors e = calibration_errors(rows, best);
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
