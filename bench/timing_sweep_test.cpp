// SPDX-License-Identifier: Apache-2.0
// The memory sweep as the timing model sees it (bench/timing_sweep.h) and the fit that uses it
// (bench/timing_fit.h): what the GPU model would record of a sweep launch, written out by hand
// for small cases; the sweep file's format; and that a sweep measured on a device whose
// constants differ from the carried profile's gives those constants back, the DRAM density
// exponent among them, which the calibration rows alone cannot separate from the phase tail.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "mlarope/error.h"
#include "timing_fit.h"
#include "timing_sweep.h"

using namespace mlarope;
using namespace mlarope::bench;

namespace {

SweepPoint point(bool in_place, std::int64_t run, std::int64_t stride, int loads) {
  SweepPoint p;
  p.in_place = in_place, p.run = run, p.stride = stride, p.loads = loads;
  p.threads = 128, p.blocks = 4, p.vectors = std::int64_t{4} * 128 * 10;  // 10 vectors a thread
  p.registers = 32, p.shared_bytes = 0;
  return p;
}

}  // namespace

TEST(TimingSweep, StatsOfACopyCountBatchesBytesAndDenseChunks) {
  const ModelLaunchStats s = sweep_stats(point(false, 16, 16, 4));
  EXPECT_EQ(s.blocks, 4);
  EXPECT_EQ(s.threads, 128);
  EXPECT_EQ(s.round_trips, 4 * 3);  // 10 vectors a thread in batches of 4: 3 per block
  EXPECT_EQ(s.load_phases, 4);
  EXPECT_EQ(s.loaded_bytes, 4 * 128 * 10 * 16);
  EXPECT_EQ(s.dram_bytes, 2 * 4 * 128 * 10 * 16);
  EXPECT_EQ(s.touched_bytes, s.dram_bytes);
  EXPECT_EQ(s.dram_chunks, 2 * 4 * 128 * 10 * 16 / 1024);  // both regions whole chunks
  EXPECT_EQ(sweep_stats(point(false, 16, 16, 1)).round_trips, 4 * 10);
  EXPECT_EQ(sweep_stats(point(false, 16, 16, 8)).round_trips, 4 * 2);
}

TEST(TimingSweep, TheInPlaceRopePatternUsesAThirdOfEachChunk) {
  // Runs of 128 bytes every 384: 81,920 bytes touched in 640 runs over 245,632 bytes.
  const ModelLaunchStats s = sweep_stats(point(true, 128, 384, 4));
  EXPECT_EQ(s.dram_bytes, 2 * 81920);
  EXPECT_EQ(s.touched_bytes, 81920);
  EXPECT_EQ(s.dram_chunks, (639 * 384 + 128 + 1023) / 1024);
  EXPECT_NEAR(static_cast<double>(s.touched_bytes) / (s.dram_chunks * 1024.0), 1.0 / 3, 0.01);
  // The same bytes contiguous, in place: every chunk whole.
  const ModelLaunchStats dense = sweep_stats(point(true, 128, 128, 4));
  EXPECT_EQ(dense.dram_chunks, 81920 / 1024);
  // Runs further apart than a chunk: a chunk each.
  EXPECT_EQ(sweep_stats(point(true, 128, 2048, 4)).dram_chunks, 640);
  // Runs that straddle chunks: 48-byte runs every 1,100 bytes (two sectors each).
  SweepPoint odd = point(true, 48, 1100, 1);
  odd.vectors = 12;  // 192 bytes: four runs, at 0, 1,100, 2,200 and 3,300
  const ModelLaunchStats s4 = sweep_stats(odd);
  EXPECT_EQ(s4.touched_bytes, 4 * 64);
  EXPECT_EQ(s4.dram_chunks, 4);  // chunks 0; 1; 2; 3 (3,300..3,347)
}

TEST(TimingSweep, TheFileRoundTripsAndBadPointsAreNamed) {
  std::vector<SweepPoint> points = {point(false, 16, 16, 2), point(true, 128, 384, 8)};
  points[0].seconds = 1.5e-4, points[1].blocks_per_sm = 3;
  const std::vector<SweepPoint> back = parse_sweep(sweep_json(points, "test"));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_FALSE(back[0].in_place);
  EXPECT_EQ(back[0].loads, 2);
  EXPECT_DOUBLE_EQ(back[0].seconds, 1.5e-4);
  EXPECT_TRUE(back[1].in_place);
  EXPECT_EQ(back[1].run, 128);
  EXPECT_EQ(back[1].stride, 384);
  EXPECT_EQ(back[1].blocks_per_sm, 3);
  EXPECT_THROW(parse_sweep("{}"), Error);
  EXPECT_THROW(parse_sweep("not json"), Error);
  EXPECT_THROW(parse_sweep(R"({"points": [{"pattern": "copy"}]})"), Error);
  EXPECT_THROW(parse_sweep(R"({"points": [{"pattern": "gather", "run": 16, "stride": 16,
      "loads": 1, "threads": 128, "blocks": 1, "vectors": 1, "registers": 1,
      "shared_bytes": 0}]})"),
               Error);
  for (const char* run_stride : {R"("run": 24, "stride": 48)", R"("run": 32, "stride": 16)"})
    EXPECT_THROW(parse_sweep(std::string(R"({"points": [{"pattern": "copy", )") + run_stride +
                             R"(, "loads": 1, "threads": 128, "blocks": 1, "vectors": 1,
                             "registers": 1, "shared_bytes": 0}]})"),
                 Error)
        << run_stride;
}

TEST(TimingSweep, MoreLoadsInFlightAndMoreBlocksAreFasterUntilBandwidthBound) {
  const DeviceProfile h200 = device_profile("h200");
  std::vector<SweepPoint> plan = sweep_plan(h200, std::int64_t{1} << 30);
  ASSERT_EQ(plan.size(), 3u * 5 * 4);
  const auto seconds = [&](bool in_place, std::int64_t run, int per_sm, int loads) {
    for (const SweepPoint& p : plan)
      if (p.in_place == in_place && p.run == run && p.blocks_per_sm == per_sm && p.loads == loads)
        return predict_sweep_seconds(p, h200);
    ADD_FAILURE() << "no such point";
    return 0.0;
  };
  EXPECT_GT(seconds(false, 16, 1, 1), 2 * seconds(false, 16, 1, 8));  // latency-bound
  EXPECT_GT(seconds(false, 16, 1, 1), 2 * seconds(false, 16, 8, 1));
  // Bandwidth-bound: 1 GiB at the copy bandwidth, within the launch overhead.
  EXPECT_NEAR(seconds(false, 16, 16, 8), (1 << 30) / h200.copy_bandwidth, 5e-6);
  // The in-place rope pattern at the same bytes: the density exponent's price.
  EXPECT_NEAR(seconds(true, 128, 16, 8) / seconds(false, 16, 16, 8),
              std::pow(3.0, h200.dram_density_exponent), 0.05);
}

TEST(TimingSweep, ASweepMeasuredOnADeviceGivesItsConstantsBack) {
  // A device whose DRAM is slower to answer and barely minds sparse pages, unlike the
  // carried profile's fit; its sweep "measured" as its own model predicts it.
  DeviceProfile truth = device_profile("h200");
  truth.dram_latency = 600e-9;
  truth.latency_load_factor = 0.5;
  truth.dram_density_exponent = 0.3;
  truth.launch_overhead = 3e-6;
  std::vector<SweepPoint> sweep = sweep_plan(truth, std::int64_t{256} << 20);
  for (SweepPoint& p : sweep) p.seconds = predict_sweep_seconds(p, truth);
  FitOptions options;
  options.random_points = 20000;
  options.carveouts_kib = {};
  const DeviceProfile fitted = fit_device_profile({}, sweep, device_profile("h200"), options);
  const FitErrors e = fit_errors({}, sweep, fitted);
  EXPECT_LT(e.largest, 0.02);
  EXPECT_NEAR(fitted.dram_density_exponent, 0.3, 0.05);
  EXPECT_NEAR(fitted.dram_latency, 600e-9, 60e-9);
  // Not asserted: the fixed costs of a launch (its overhead, the phase tail), a few
  // microseconds of launches of 60 us and more, which the latency can make up; the
  // calibration rows (short launches, copies) pin those.
  // The carried profile explains the same sweep badly: the in-place points by far.
  EXPECT_GT(fit_errors({}, sweep, device_profile("h200")).largest, 0.5);
  EXPECT_THROW(fit_device_profile({}, {}, truth, options), Error);
}

TEST(TimingSweep, AHeldConstantKeepsItsValueAndTheOthersAreFitted) {
  DeviceProfile truth = device_profile("h200");
  truth.dram_latency = 600e-9;
  truth.latency_load_factor = 0.5;
  truth.dram_density_exponent = 0.3;
  std::vector<SweepPoint> sweep = sweep_plan(truth, std::int64_t{256} << 20);
  for (SweepPoint& p : sweep) p.seconds = predict_sweep_seconds(p, truth);
  FitOptions options;
  options.random_points = 5000;
  options.carveouts_kib = {};
  // Held at the truth: kept to the bit, the free constants found around it.
  options.held = {{"dram_latency", 600e-9}, {"latency_load_factor", 0.5}};
  const DeviceProfile right = fit_device_profile({}, sweep, device_profile("h200"), options);
  EXPECT_EQ(right.dram_latency, 600e-9);
  EXPECT_EQ(right.latency_load_factor, 0.5);
  EXPECT_NEAR(right.dram_density_exponent, 0.3, 0.05);
  EXPECT_LT(fit_errors({}, sweep, right).largest, 0.02);
  // Held at a wrong latency, from a start that explains the sweep exactly: kept, and the
  // sweep says so in the errors.
  options.held = {{"dram_latency", 350e-9}, {"latency_load_factor", 0.5}};
  const DeviceProfile wrong = fit_device_profile({}, sweep, truth, options);
  EXPECT_EQ(wrong.dram_latency, 350e-9);
  EXPECT_GT(fit_errors({}, sweep, wrong).largest, 0.1);
  options.held = {{"dram_latency_ns", 600}};  // not a fitted constant
  EXPECT_THROW(fit_device_profile({}, sweep, truth, options), Error);
  options.held = {{"dram_latency", 600}};  // seconds, not nanoseconds: outside its range
  EXPECT_THROW(fit_device_profile({}, sweep, truth, options), Error);
}
