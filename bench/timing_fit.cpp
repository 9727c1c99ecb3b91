// SPDX-License-Identifier: Apache-2.0
#include "timing_fit.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "mlarope/error.h"

namespace mlarope::bench {
namespace {

// The objective: the largest error first, the median to break ties.
double score(const std::vector<CalibrationRow>& rows, const std::vector<SweepPoint>& sweep,
             const DeviceProfile& d) {
  const FitErrors e = fit_errors(rows, sweep, d);
  return e.largest + 1e-3 * e.median;
}

// A fitted constant, its profile name and its plausible range (the search's; the descent stays
// inside it).
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

// The ranges of `options`: a held constant's range is its value.
std::vector<Parameter> parameters(const FitOptions& options) {
  std::vector<Parameter> ranges(std::begin(kParameters), std::end(kParameters));
  for (const auto& held : options.held) {
    const std::string& name = held.first;
    const double value = held.second;
    const auto it = std::find_if(ranges.begin(), ranges.end(),
                                 [&name](const Parameter& p) { return name == p.name; });
    if (it == ranges.end()) throw Error("fit: " + name + " is not a fitted constant");
    if (!(value >= it->lo && value <= it->hi))
      throw Error("fit: " + name + " held outside its plausible range");
    it->lo = it->hi = value;
  }
  return ranges;
}

// A random point of the ranges (log-uniform for the latencies, uniform for the rest).
DeviceProfile random_point(DeviceProfile d, const std::vector<Parameter>& ranges,
                           std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  for (const Parameter& p : ranges) {
    const bool log_scale = p.lo > 0 && p.hi / p.lo > 5;
    d.*p.field = log_scale ? p.lo * std::pow(p.hi / p.lo, u(rng)) : p.lo + (p.hi - p.lo) * u(rng);
  }
  return d;
}

// Coordinate descent with shrinking steps from `d`.
DeviceProfile descend(const std::vector<CalibrationRow>& rows, const std::vector<SweepPoint>& sweep,
                      const std::vector<Parameter>& ranges, DeviceProfile d) {
  double best = score(rows, sweep, d);
  for (double step = 0.25; step > 1e-4; step /= 2)
    for (bool improved = true; improved;) {
      improved = false;
      for (const Parameter& p : ranges)
        for (const double direction : {1.0, -1.0}) {
          DeviceProfile t = d;
          const double scale = d.*p.field != 0 ? d.*p.field : (p.hi - p.lo) / 4;
          t.*p.field = std::min(p.hi, std::max(p.lo, d.*p.field + direction * step * scale));
          const double s = score(rows, sweep, t);
          if (s < best - 1e-12) best = s, d = t, improved = true;
        }
    }
  return d;
}

}  // namespace

FitErrors fit_errors(const std::vector<CalibrationRow>& rows, const std::vector<SweepPoint>& sweep,
                     const DeviceProfile& device) {
  FitErrors e;
  const CalibrationErrors c = calibration_errors(rows, device);
  e.rows = c.time, e.copies = c.copy;
  for (const SweepPoint& p : sweep)
    e.sweep.push_back(std::fabs(predict_sweep_seconds(p, device) / p.seconds - 1));
  std::vector<double> all = e.rows;
  all.insert(all.end(), e.copies.begin(), e.copies.end());
  all.insert(all.end(), e.sweep.begin(), e.sweep.end());
  std::sort(all.begin(), all.end());
  e.median = all.empty() ? 0 : all[all.size() / 2];
  e.largest = all.empty() ? 0 : all.back();
  return e;
}

DeviceProfile fit_device_profile(const std::vector<CalibrationRow>& rows,
                                 const std::vector<SweepPoint>& sweep, const DeviceProfile& start,
                                 const FitOptions& options) {
  if (rows.empty() && sweep.empty()) throw Error("fit: no rows and no sweep to fit to");
  for (const SweepPoint& p : sweep)
    if (!(p.seconds > 0)) throw Error("fit: a sweep point without a measured time");
  std::vector<int> carveouts = options.carveouts_kib;
  if (carveouts.empty()) carveouts = {start.shared_carveout_bytes / 1024};
  const std::vector<Parameter> ranges = parameters(options);
  DeviceProfile held = start;  // the start with the held constants
  for (const Parameter& p : ranges)
    if (p.lo == p.hi) held.*p.field = p.lo;
  DeviceProfile best = held;
  double best_score = score(rows, sweep, held);
  std::mt19937 rng(options.seed);
  // The descent can stall on the largest error's kinks: it starts from each of the search's
  // kStarts best points (the start among them), and the best end wins.
  constexpr std::size_t kStarts = 8;
  for (const int kib : carveouts) {
    DeviceProfile base = held;
    base.shared_carveout_bytes = kib * 1024;
    std::vector<std::pair<double, DeviceProfile>> found = {{score(rows, sweep, base), base}};
    for (int i = 0; i < options.random_points; ++i) {
      const DeviceProfile d = random_point(base, ranges, rng);
      found.emplace_back(score(rows, sweep, d), d);
      if (found.size() > 4 * kStarts) {  // keep the best kStarts
        std::partial_sort(found.begin(), found.begin() + kStarts, found.end(),
                          [](const auto& a, const auto& b) { return a.first < b.first; });
        found.resize(kStarts);
      }
    }
    std::sort(found.begin(), found.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    found.resize(std::min(found.size(), kStarts));
    for (const auto& [s, d] : found) {
      const DeviceProfile end = descend(rows, sweep, ranges, d);
      const double end_score = score(rows, sweep, end);
      if (end_score < best_score) best_score = end_score, best = end;
    }
  }
  return best;
}

}  // namespace mlarope::bench
