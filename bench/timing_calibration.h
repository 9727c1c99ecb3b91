// The timing model's calibration data: the rows an H200 measured (cuda/host/devices/
// h200.calibration.json), each op run at its benchmark shape under the GPU model (a sample of
// its blocks), with the ptxas figures of the commit that was measured. Shared by the
// calibration test and the tool that fits the profile's constants (fit_timing_model).
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

/// The rows of `devices_dir`/h200.calibration.json, run under the model. Throws
/// mlarope::Error on a malformed file or an unknown op or shape.
std::vector<CalibrationRow> calibration_rows(const std::string& devices_dir);

/// Each prediction's relative error (|predicted / measured - 1|): the rows' times, then the
/// rows' copies, in row order.
struct CalibrationErrors {
  std::vector<double> time, copy;
  double median = 0, largest = 0;  ///< over both
};
CalibrationErrors calibration_errors(const std::vector<CalibrationRow>& rows, const DeviceProfile& device);

}  // namespace mlarope::bench
