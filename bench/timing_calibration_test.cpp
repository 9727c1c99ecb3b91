// SPDX-License-Identifier: Apache-2.0
// The timing model (include/mlarope/timing.h) held to what an H200 measured: the 16 rows of
// cuda/host/devices/h200.calibration.json (cuda_bench --graph, T = 1,024), each op run at its
// full benchmark shape under the GPU model (a sample of its blocks), with the kernels' ptxas
// figures of the commit that was measured, predicted with the H200 profile. Every row's time,
// and every row's copy of the same bytes, within 20% of what was measured; the median within
// 10%. The model must explain the kernels that were measured before it judges new ones.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "timing_calibration.h"

using namespace mlarope;
using namespace mlarope::bench;

TEST(TimingCalibration, PredictsEveryMeasuredH200RowWithin20PercentAndTheMedianWithin10) {
  const std::vector<CalibrationRow> rows =
      calibration_rows(std::string(MLAROPE_SOURCE_DIR) + "/cuda/host/devices");
  ASSERT_EQ(rows.size(), 16u);
  const DeviceProfile h200 = device_profile("h200");
  const CalibrationErrors e = calibration_errors(rows, h200);
  std::printf("%-18s %-22s %-34s %4s %5s %6s %6s %6s %9s %9s\n", "op", "shape", "kernel", "occ",
              "limit", "waves", "trips", "KiB/SM", "measured", "predicted");
  std::size_t copies = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const CalibrationRow& r = rows[i];
    const TimePrediction p = predict_time(r.stats, r.kernel, h200, r.bytes);
    std::printf("%-18s %-22s %-34s %4d %5.5s %6.2f %6.1f %6.1f %7.1fus %7.1fus", r.op.c_str(),
                r.shape.c_str(), r.stats.kernel.c_str(), p.occupancy.blocks_per_sm,
                p.occupancy.limit.c_str(), p.waves, p.round_trips_per_block,
                p.bytes_in_flight_per_sm / 1024, r.seconds * 1e6, p.seconds * 1e6);
    EXPECT_LE(e.time[i], 0.20) << r.op << " " << r.shape << ": predicted " << p.seconds * 1e6
                               << " us, measured " << r.seconds * 1e6 << " us";
    if (r.copy_fraction > 0) {
      const double predicted = predict_copy_time(r.bytes, h200).floor_fraction;
      std::printf("; copy %.2f, predicted %.2f", r.copy_fraction, predicted);
      EXPECT_LE(e.copy[copies++], 0.20)
          << "the copy of " << r.op << " " << r.shape << ": predicted " << predicted
          << ", measured " << r.copy_fraction;
    }
    std::printf("\n");
  }
  std::printf("%zu predictions: median error %.1f%%, largest %.1f%%\n",
              e.time.size() + e.copy.size(), 100 * e.median, 100 * e.largest);
  EXPECT_EQ(copies, 12u);
  EXPECT_LE(e.median, 0.10);
}
