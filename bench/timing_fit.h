// SPDX-License-Identifier: Apache-2.0
// Fitting a device profile's fitted constants (the latencies, the load factor, the overheads,
// the density exponent, the phase tail, the shared-memory carveout) to what a device measured:
// the calibration rows (our kernels and their copies) and, where one was run, the memory sweep
// (bench/timing_sweep.h). The objective is the largest relative error over every prediction,
// then the median: for each carveout, a seeded random search over plausible ranges, then a
// coordinate descent from the best point.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mlarope/timing.h"
#include "timing_calibration.h"
#include "timing_sweep.h"

namespace mlarope::bench {

/// Each prediction's relative error: the rows' times, the rows' copies, the sweep's points.
struct FitErrors {
  std::vector<double> rows, copies, sweep;
  double median = 0, largest = 0;  ///< over all of them
};
FitErrors fit_errors(const std::vector<CalibrationRow>& rows, const std::vector<SweepPoint>& sweep,
                     const DeviceProfile& device);

struct FitOptions {
  int random_points = 20000;  ///< per carveout
  /// Carveouts to try, KiB (sm_90's); empty: keep the start's.
  std::vector<int> carveouts_kib = {8, 16, 32, 64, 100, 132, 164, 196, 228};
  unsigned seed = 20261205;
  /// Constants held at a value, not fitted (a profile field name and its value): what another
  /// measurement settled, such as the idle DRAM latency.
  std::vector<std::pair<std::string, double>> held;
};

/// The constants, within their plausible ranges, that best explain `rows` and `sweep` (either
/// may be empty, not both), starting from `start` (whose other fields are kept).
DeviceProfile fit_device_profile(const std::vector<CalibrationRow>& rows,
                                 const std::vector<SweepPoint>& sweep, const DeviceProfile& start,
                                 const FitOptions& options);

}  // namespace mlarope::bench
