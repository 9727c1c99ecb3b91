// SPDX-License-Identifier: Apache-2.0
// The timing model: what a launch the GPU model ran would take on a GPU (docs/architecture.md rule
// 5).
//
// The GPU model (HostStreamOptions::gpu_model) counts what a launch moves and, per block, the
// round trips its threads wait for: a thread's loads since its last store can be in flight
// together; a load of an index array is a round trip of its own. This header turns those
// figures into a time on a device described by a profile:
//   - occupancy: resident blocks per SM from the block size, the kernel's registers and
//     shared memory (ptxas's figures) and the device's limits;
//   - waves: the grid in groups of at most the resident blocks; the last wave may be partial;
//   - per wave, Little's law with a load-dependent latency: a block needs `round trips` x the
//     DRAM latency at the bandwidth the wave draws, plus its index round trips at the L2's
//     latency, and no wave moves its bytes faster than the device's copy bandwidth, less for
//     a launch that uses only part of each DRAM page it opens;
//   - a fixed overhead per launch (graph replay, ramp-up and drain).
// The same model predicts a device-to-device copy of the same bytes (the benchmarks' `copy`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlarope/backend.h"

namespace mlarope {

/// A device's constants (cuda/host/devices/<name>.json).
struct DeviceProfile {
  std::string name;
  int sms = 0;
  int max_threads_per_sm = 0;
  int max_blocks_per_sm = 0;
  int registers_per_sm = 0;
  int register_allocation_unit = 0;  ///< registers, per warp
  int shared_bytes_per_sm = 0;
  /// Shared memory per SM the driver configures for a kernel that states no carveout
  /// preference (ours state none), or what one block needs if that is more; at most
  /// shared_bytes_per_sm.
  int shared_carveout_bytes = 0;
  int shared_bytes_reserved_per_block = 0;
  double l2_bytes = 0;
  double copy_bandwidth = 0;  ///< bytes/s (read + write) of a large device-to-device copy
  /// DRAM bandwidth for sparse use of its pages: copy_bandwidth x density^exponent, density
  /// the share of each 1 KiB chunk a launch uses (ModelLaunchStats::dram_chunks).
  double dram_density_exponent = 0;
  double dram_latency = 0;  ///< s, of a load on an idle memory system
  double latency_load_factor =
      0;  ///< latency = dram_latency x (1 + factor x u / (1 - u)), u = bandwidth / copy_bandwidth
  double l2_latency = 0;  ///< s, of a load the L2 holds (index arrays)
  /// s a block waits at the end of each phase with loads (a barrier waits for the slowest
  /// warp: the tail of the latency, beyond its mean)
  double phase_tail = 0;
  double launch_overhead = 0;  ///< s per kernel launch (graph replay)
  double copy_overhead = 0;    ///< s per cudaMemcpyAsync (graph replay)
  std::string source;          ///< where the constants come from, how they were fitted
};

/// The profile of `json` (the format of cuda/host/devices/*.json). Throws mlarope::Error
/// naming a missing or malformed field.
DeviceProfile parse_device_profile(const std::string& json);
/// A profile this library carries ("h200"). Throws mlarope::Error for other names.
DeviceProfile device_profile(const std::string& name);

/// What ptxas said of one kernel (-Xptxas -v).
struct KernelResource {
  std::string kernel;  ///< demangled, namespaces dropped: "kv_split_backward_kernel<float, 1>"
  std::string arch;    ///< "sm_90"
  int registers = 0;
  long long spill_stores = 0, spill_loads = 0, stack = 0, smem = 0;  ///< bytes
};

/// The kernels of ptxas -v output (any other line is ignored), in the order given.
std::vector<KernelResource> parse_ptxas(const std::string& text);
/// True when `text` holds ptxas -v lines.
bool is_ptxas_log(const std::string& text);
/// The CUDA kernels' resources for sm_90 as this source compiles them (cuda/host/devices/
/// sm_90.ptxas.txt; a test of CUDA builds holds it to the build's own ptxas output).
const std::vector<KernelResource>& built_kernel_resources();
/// The CUDA kernel (KernelResource::kernel) that runs a GPU-model kernel name
/// ("rope/chunked_vector/bf16" -> "rope_kernel<RopeChunkedRows<BFloat16, 4> >"); "" if none.
std::string cuda_kernel_of(const std::string& model_kernel);
/// The resource of `model_kernel` in `resources`; throws mlarope::Error when it is missing.
KernelResource resource_of(const std::string& model_kernel,
                           const std::vector<KernelResource>& resources);

/// Resident blocks per SM and what limits them.
struct Occupancy {
  int blocks_per_sm = 0;
  std::string limit;  ///< "threads", "registers", "shared memory" or "blocks"
};
Occupancy occupancy(const DeviceProfile& device, int threads, int registers,
                    long long shared_bytes);

/// A predicted time and how it comes about.
struct TimePrediction {
  double seconds = 0;
  double floor_fraction = 0;  ///< minimum bytes / copy bandwidth / seconds
  Occupancy occupancy;
  double waves = 0;                   ///< blocks / resident blocks
  double bytes_in_flight_per_sm = 0;  ///< of the first wave: resident threads x bytes a batch
  double round_trips_per_block = 0;   ///< data batches on a block's critical path
  double index_round_trips_per_block = 0;
  double load_phases_per_block = 0;
  double latency = 0;       ///< s, the loaded DRAM latency of the first wave
  double dram_bytes = 0;    ///< the launch's traffic (scaled up from a sample)
  double dram_density = 1;  ///< the share of each DRAM chunk it opens that it uses
  /// Shares of the copy bandwidth: what the launch's DRAM density leaves it, and what its
  /// first wave draws (at most the first).
  double bandwidth_available = 1, bandwidth_drawn = 0;
  bool fits_l2 = false;  ///< the traffic fits the L2 (a warm call would be faster)
  /// "bandwidth" where the first wave keeps the bandwidth available to it at least
  /// kBandwidthBound busy, else "latency" (its round trips, not the DRAM, set its time).
  std::string limit;
  static constexpr double kBandwidthBound = 0.9;
};

/// The time of a launch the GPU model ran (`stats`, of the whole grid or of a sample of
/// its blocks) on `device`, for a call that must move `minimum_bytes`.
TimePrediction predict_time(const ModelLaunchStats& stats, const KernelResource& kernel,
                            const DeviceProfile& device, std::int64_t minimum_bytes);
/// The time of a device-to-device copy moving `bytes` (half read, half written).
TimePrediction predict_copy_time(std::int64_t bytes, const DeviceProfile& device);

}  // namespace mlarope
