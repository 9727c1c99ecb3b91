// SPDX-License-Identifier: Apache-2.0
// The timing model's parts against figures worked out by hand: occupancy from the sm_90 rules,
// the device profile's parsing, the CUDA kernel of each model kernel, and how a prediction
// moves with round trips, waves and sparse DRAM use.
#include <gtest/gtest.h>

#include "mlarope/error.h"
#include "mlarope/timing.h"

using namespace mlarope;

namespace {

DeviceProfile test_device() {
  DeviceProfile d = device_profile("h200");
  d.dram_latency = 500e-9;
  d.latency_load_factor = 0.5;
  d.l2_latency = 200e-9;
  d.phase_tail = 1e-6;
  d.launch_overhead = 2e-6;
  d.copy_overhead = 3e-6;
  d.dram_density_exponent = 1;
  d.shared_carveout_bytes = d.shared_bytes_per_sm;
  return d;
}

// A launch of `blocks` blocks of 128 threads, each block waiting for `trips` round trips in one
// phase with loads, moving `bytes` densely.
ModelLaunchStats launch(std::int64_t blocks, std::int64_t trips, std::int64_t bytes) {
  ModelLaunchStats s;
  s.kernel = "rope/chunked_vector/bf16";
  s.blocks = s.blocks_observed = s.blocks_run = blocks;
  s.threads = 128;
  s.round_trips = trips * blocks;
  s.load_phases = blocks;
  s.load_batches = trips * blocks * 128;
  s.loaded_bytes = bytes / 2;
  s.dram_bytes = s.touched_bytes = bytes;
  s.dram_chunks = bytes / 1024;
  return s;
}

}  // namespace

TEST(TimingModel, OccupancyFollowsTheSm90Rules) {
  const DeviceProfile d = test_device();
  // 80 registers x 32 lanes = 2560 a warp (a multiple of 256); 4 warps: 10240 a block; 65536 /
  // 10240 = 6.
  EXPECT_EQ(occupancy(d, 128, 80, 536).blocks_per_sm, 6);
  EXPECT_EQ(occupancy(d, 128, 80, 536).limit, "registers");
  EXPECT_EQ(occupancy(d, 128, 75, 536).blocks_per_sm, 6);  // 75 x 32 = 2400 rounds up to 2560
  EXPECT_EQ(occupancy(d, 128, 72, 536).blocks_per_sm, 7);  // 2304 a warp: 65536 / 9216 = 7
  EXPECT_EQ(occupancy(d, 1024, 16, 0).blocks_per_sm, 2);   // 2048 threads an SM
  EXPECT_EQ(occupancy(d, 1024, 16, 0).limit, "threads");
  EXPECT_EQ(occupancy(d, 32, 16, 0).blocks_per_sm, 32);  // 32 blocks an SM at most
  EXPECT_EQ(occupancy(d, 32, 16, 0).limit, "blocks");
  DeviceProfile small = d;
  small.shared_carveout_bytes = 32 * 1024;  // 16912 + 1024 reserved: one block in 32 KiB
  EXPECT_EQ(occupancy(small, 128, 40, 16912).blocks_per_sm, 1);
  EXPECT_EQ(occupancy(small, 128, 40, 16912).limit, "shared memory");
  small.shared_carveout_bytes = 8 * 1024;  // less than a block needs: the driver gives one block's
  EXPECT_EQ(occupancy(small, 128, 40, 16912).blocks_per_sm, 1);
}

TEST(TimingModel, ProfilesParseAndNameWhatIsWrong) {
  const DeviceProfile h200 = device_profile("h200");
  EXPECT_EQ(h200.name, "h200");
  EXPECT_EQ(h200.sms, 132);
  EXPECT_GT(h200.copy_bandwidth, 4e12);
  EXPECT_THROW(device_profile("h100"), Error);
  try {
    parse_device_profile(R"({"name": "x", "sms": 132})");
    FAIL() << "a profile without its limits was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_threads_per_sm"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_device_profile("{not json"), Error);
}

TEST(TimingModel, EveryModelKernelHasItsCudaKernelAndItsPtxasFigures) {
  EXPECT_EQ(cuda_kernel_of("rope/chunked_vector/bf16"),
            "rope_kernel<RopeChunkedRows<BFloat16, 4> >");
  EXPECT_EQ(cuda_kernel_of("rope_backward/chunked_scalar/f32"),
            "rope_kernel<RopeChunkedRows<float, 1> >");
  EXPECT_EQ(cuda_kernel_of("rope/staged_vector/f16"), "rope_kernel<RopeStagedRounds<Half> >");
  EXPECT_EQ(cuda_kernel_of("rope/whole_slice_scalar/bf16"),
            "rope_kernel<RopeWholeSliceRows<BFloat16> >");
  EXPECT_EQ(cuda_kernel_of("kv_split/vector/f32"), "kv_split_kernel<float, 2>");
  EXPECT_EQ(cuda_kernel_of("kv_split_backward/scalar/bf16"),
            "kv_split_backward_kernel<BFloat16, 1>");
  EXPECT_EQ(cuda_kernel_of("yarn_tables"), "yarn_tables_kernel");
  EXPECT_EQ(cuda_kernel_of("rope/unknown/bf16"), "");
  EXPECT_EQ(built_kernel_resources().size(), 25u);
  for (const char* op : {"rope", "rope_backward"})
    for (const char* variant :
         {"chunked_vector", "chunked_scalar", "staged_vector", "whole_slice_scalar"})
      for (const char* dtype : {"f32", "bf16", "f16"})
        EXPECT_GT(resource_of(std::string(op) + "/" + variant + "/" + dtype,
                              built_kernel_resources())
                      .registers,
                  0);
  for (const char* op : {"kv_split", "kv_split_backward"})
    for (const char* variant : {"vector", "scalar"})
      for (const char* dtype : {"f32", "bf16", "f16"})
        EXPECT_GT(resource_of(std::string(op) + "/" + variant + "/" + dtype,
                              built_kernel_resources())
                      .registers,
                  0);
  EXPECT_THROW(resource_of("rope/unknown/bf16", built_kernel_resources()), Error);
}

TEST(TimingModel, PredictionsMoveWithRoundTripsWavesAndDensity) {
  const DeviceProfile d = test_device();
  KernelResource k;
  k.registers = 80;
  k.smem = 536;
  const std::int64_t bytes = 100 << 20;
  const TimePrediction many = predict_time(launch(1024, 24, bytes), k, d, bytes);
  const TimePrediction few = predict_time(launch(1024, 4, bytes), k, d, bytes);
  EXPECT_EQ(many.limit, "latency");  // its round trips leave the DRAM idle most of the time
  EXPECT_EQ(many.bandwidth_available, 1.0);
  EXPECT_LT(many.bandwidth_drawn, TimePrediction::kBandwidthBound);
  EXPECT_LT(few.seconds, many.seconds);
  EXPECT_GT(few.bandwidth_drawn, many.bandwidth_drawn);
  EXPECT_NEAR(many.waves, 1024.0 / (6 * 132), 1e-12);
  // Latency bound: two waves (792 + 232 blocks), each at least 24 round trips of the idle
  // latency plus the phase tail, plus the launch.
  EXPECT_GT(many.seconds, d.launch_overhead + 2 * (24 * d.dram_latency + d.phase_tail));
  // One round trip a block: the bytes at the copy bandwidth bound it from below.
  const TimePrediction streaming = predict_time(launch(792, 1, bytes), k, d, bytes);
  EXPECT_GE(streaming.seconds, d.launch_overhead + bytes / d.copy_bandwidth);
  EXPECT_LT(streaming.floor_fraction, 1.0);
  EXPECT_EQ(streaming.limit, "bandwidth");
  EXPECT_GT(streaming.bandwidth_drawn, TimePrediction::kBandwidthBound);
  EXPECT_LT(streaming.bandwidth_drawn, 1.0);
  // A third of each DRAM chunk used: a third of the bandwidth (exponent 1), so slower.
  ModelLaunchStats sparse = launch(792, 1, bytes);
  sparse.dram_chunks = 3 * bytes / 1024;
  const TimePrediction strided = predict_time(sparse, k, d, bytes);
  EXPECT_NEAR(strided.dram_density, 1.0 / 3, 1e-9);
  EXPECT_NEAR(strided.bandwidth_available, 1.0 / 3, 1e-9);
  EXPECT_EQ(strided.limit, "bandwidth");  // of the third it has
  EXPECT_GT(strided.bandwidth_drawn, TimePrediction::kBandwidthBound / 3);
  EXPECT_LT(strided.bandwidth_drawn, 1.0 / 3);
  EXPECT_GT(strided.seconds, d.launch_overhead + 3.0 * bytes / d.copy_bandwidth);
  // A sample of one block in 16 stands for the whole grid.
  ModelLaunchStats sample = launch(1024, 24, bytes);
  sample.blocks_observed = sample.blocks_run = 64;
  sample.round_trips = std::int64_t{24} * 64;
  sample.load_phases = 64;
  sample.dram_bytes = bytes / 16;
  EXPECT_NEAR(predict_time(sample, k, d, bytes).seconds, many.seconds, 1e-12);
  // The copy: its overhead plus the bytes at the copy bandwidth.
  EXPECT_NEAR(predict_copy_time(bytes, d).seconds, d.copy_overhead + bytes / d.copy_bandwidth,
              1e-15);
  EXPECT_EQ(predict_copy_time(bytes, d).bandwidth_drawn,
            predict_copy_time(bytes, d).floor_fraction);
}

#if defined(MLAROPE_BUILT_PTXAS)
#include <fstream>
#include <sstream>

// The ptxas figures the library carries (cuda/host/devices/sm_90.ptxas.txt) are this build's:
// a kernel change that moves a register count fails here until the file is copied again
// (cp build/ptxas.txt cuda/host/devices/sm_90.ptxas.txt).
TEST(TimingModel, CarriedPtxasFiguresAreThisBuilds) {
  std::ifstream in(MLAROPE_BUILT_PTXAS);
  ASSERT_TRUE(in) << MLAROPE_BUILT_PTXAS << " is missing";
  std::stringstream text;
  text << in.rdbuf();
  const std::vector<KernelResource> built = parse_ptxas(text.str());
  ASSERT_EQ(built.size(), built_kernel_resources().size());
  for (const KernelResource& k : built) {
    bool found = false;
    for (const KernelResource& carried : built_kernel_resources())
      if (carried.kernel == k.kernel) {
        found = true;
        EXPECT_EQ(carried.registers, k.registers) << k.kernel;
        EXPECT_EQ(carried.smem, k.smem) << k.kernel;
        EXPECT_EQ(carried.spill_stores, k.spill_stores) << k.kernel;
      }
    EXPECT_TRUE(found) << k.kernel << " is not in cuda/host/devices/sm_90.ptxas.txt";
  }
}
#endif
