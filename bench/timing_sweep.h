// SPDX-License-Identifier: Apache-2.0
// The memory sweep (bench/memory_sweep.cu, run on a device by ci/gpu-check.sh) as the timing
// model sees it. Each point of the sweep is one launch of a plain kernel whose threads move
// 16-byte vectors in batches of `loads` (every load of a batch issued before its first store),
// with the grid sized to fill the SMs at a chosen occupancy, in one of two patterns:
//   - copy: a contiguous source to a contiguous destination (out of place);
//   - in place: runs of `run` bytes every `stride` bytes read and written back, the pattern of
//     in-place rope (a 64-element slice of each 192-element head: run 128, stride 384 in bf16).
// The kernel is simple enough that what the GPU model would record of it is written out here
// (sweep_stats), so that the sweep's measured times pin the constants the calibration rows
// cannot separate: the latency curve (occupancy x loads in flight) and the DRAM density
// exponent (the in-place pattern at enough bytes in flight to be bandwidth-bound).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlarope/timing.h"

namespace mlarope::bench {

/// One launch of the sweep and what it measured.
struct SweepPoint {
  bool in_place = false;
  std::int64_t run = 16, stride = 16;  ///< bytes; copy: run == stride (contiguous)
  int loads = 1;                       ///< 16-byte loads of a thread in flight before its stores
  int threads = 128;                   ///< per block
  std::int64_t blocks = 0;             ///< the grid
  std::int64_t vectors = 0;            ///< 16-byte vectors moved (read once, written once)
  int registers = 0;                   ///< the kernel's, from the driver
  std::int64_t shared_bytes = 0;       ///< dynamic shared memory per block (sets occupancy)
  int blocks_per_sm = 0;               ///< the driver's occupancy; 0 where not recorded
  double seconds = 0;                  ///< measured, one launch; 0 where not measured
};

/// The points of a sweep file (memory_sweep's JSON). Throws mlarope::Error naming a missing or
/// malformed field.
std::vector<SweepPoint> parse_sweep(const std::string& json);
/// The JSON of `points` (the format parse_sweep reads).
std::string sweep_json(const std::vector<SweepPoint>& points, const std::string& device);

/// What the GPU model would record of the point's launch: one phase per block, a block's
/// critical path the batches of its busiest thread, the DRAM chunks of the pattern.
ModelLaunchStats sweep_stats(const SweepPoint& p);
/// The kernel's resources as the timing model takes them (registers, shared memory).
KernelResource sweep_resource(const SweepPoint& p);
/// The point's predicted time on `device`.
double predict_sweep_seconds(const SweepPoint& p, const DeviceProfile& device);

/// The sweep memory_sweep runs on `device` (points not measured): occupancy of 1 to 16 blocks
/// of 128 threads an SM x 1 to 8 loads in flight x the copy and two in-place patterns, each
/// moving `bytes` (read + written).
std::vector<SweepPoint> sweep_plan(const DeviceProfile& device, std::int64_t bytes);

}  // namespace mlarope::bench
