// SPDX-License-Identifier: Apache-2.0
#include "timing_fit.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "mlarope/error.h"

namespace mlarope::bench {
namespace {

// The objective: the largest error first, the median to break ties.
double score(const std::vector<CalibrationRow>& rows, const std::vector<SweepPoint>& sweep,
             const DeviceProfile& d) {
  const FitErrors e = fit_errors(rows, sweep, d);
  return e.largest + 1e-3 * e.median;
}

// A fitted constant and its plausible range (the search's; the descent stays inside it).
struct Parameter {
  double DeviceProfile::*field;
  double lo, hi;
};

const Parameter kParameters[] = {
    {&DeviceProfile::dram_latency, 300e-9, 1200e-9},  // idle HBM: about 550 ns
    {&DeviceProfile::latency_load_factor, 0.0, 3.0},   {&DeviceProfile::l2_latency, 50e-9, 500e-9},
    {&DeviceProfile::launch_overhead, 1e-6, 10e-6},    {&DeviceProfile::copy_overhead, 1e-6, 10e-6},
    {&DeviceProfile::dram_density_exponent, 0.0, 2.5}, {&DeviceProfile::phase_tail, 0.0, 4e-6},
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
DeviceProfile descend(const std::vector<CalibrationRow>& rows, const std::vector<SweepPoint>& sweep,
                      DeviceProfile d) {
  double best = score(rows, sweep, d);
  for (double step = 0.25; step > 1e-4; step /= 2)
    for (bool improved = true; improved;) {
      improved = false;
      for (const Parameter& p : kParameters)
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
  DeviceProfile best = start;
  double best_score = score(rows, sweep, start);
  std::mt19937 rng(options.seed);
  // The descent can stall on the largest error's kinks: it starts from each of the search's
  // kStarts best points (the start among them), and the best end wins.
  constexpr std::size_t kStarts = 8;
  for (const int kib : carveouts) {
    DeviceProfile base = start;
    base.shared_carveout_bytes = kib * 1024;
    std::vector<std::pair<double, DeviceProfile>> found = {{score(rows, sweep, base), base}};
    for (int i = 0; i < options.random_points; ++i) {
      const DeviceProfile d = random_point(base, rng);
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
      const DeviceProfile end = descend(rows, sweep, d);
      const double end_score = score(rows, sweep, end);
      if (end_score < best_score) best_score = end_score, best = end;
    }
  }
  return best;
}

}  // namespace mlarope::bench
