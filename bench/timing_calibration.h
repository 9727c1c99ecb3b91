// SPDX-License-Identifier: Apache-2.0
// The timing model's calibration data: the rows an H200 measured (cuda/host/devices/
// h200.calibration.json), each with what the GPU model recorded of the kernel that was measured
// (its "model" figures, recorded when the kernels were those of the measured commit: the model
// must explain those kernels, whatever the kernels are now) and the ptxas figures of that
// commit. Shared by the calibration test and the tool that fits the profile's constants
// (fit_timing_model), which also records the figures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlarope/timing.h"

namespace mlarope::bench {

/// One measured row with the model's figures of its launch.
struct CalibrationRow {
  std::string op, shape;
  double seconds = 0;         ///< measured, one call
  double copy_fraction = -1;  ///< measured copy of the same bytes; < 0 where not measured
  std::int64_t bytes = 0;     ///< the op's minimum bytes
  ModelLaunchStats stats;
  KernelResource kernel;
};

/// The rows of `devices_dir`/h200.calibration.json with their recorded model figures. Throws
/// mlarope::Error on a malformed file or a row without figures.
std::vector<CalibrationRow> calibration_rows(const std::string& devices_dir);

/// Runs every row's op at its benchmark shape under the GPU model (a sample of its blocks) with
/// the kernels of this build, and writes the figures into the rows of the file. Only right when
/// this build's kernels are the ones that were measured.
void record_calibration_model(const std::string& devices_dir);

/// Each prediction's relative error (|predicted / measured - 1|): the rows' times, then the
/// rows' copies, in row order.
struct CalibrationErrors {
  std::vector<double> time, copy;
  double median = 0, largest = 0;  ///< over both
};
CalibrationErrors calibration_errors(const std::vector<CalibrationRow>& rows,
                                     const DeviceProfile& device);

}  // namespace mlarope::bench
