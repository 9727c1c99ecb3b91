// SPDX-License-Identifier: Apache-2.0
// Block barriers and shared memory (kernels/portability.h, HostExecutor::run_phased): a body
// written as phases runs every thread of a block through phase k before phase k + 1, in any
// thread order; under the GPU model a barrier ends a race window, and shared memory is
// checked for races and bounds within its block.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "host/gpu_model.h"
#include "host/host_executor.h"
#include "test_support/block_sum.h"

namespace mlarope::test {
namespace {

using host::HostExecutor;
using kernels::GridShape;
using test_kernels::BlockSum;
using test_kernels::BlockSumArgs;
using test_kernels::BlockSumFault;

constexpr int kThreads = 64, kBlocks = 5;

struct Data {
  std::vector<float> in = std::vector<float>(std::size_t{kBlocks} * kThreads);
  std::vector<float> out = std::vector<float>(kBlocks, -1.0f);
  Data() {
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 97);  // exact sums
  }
  BlockSumArgs args() { return {in.data(), out.data()}; }
  float expected(int block) const {
    float sum = 0;
    for (int t = 0; t < kThreads; ++t)
      sum += in[static_cast<std::size_t>(block) * kThreads + static_cast<std::size_t>(t)];
    return sum;
  }
  detail::Footprint footprint() {
    detail::Footprint f;
    f.add("in",
          contiguous_view<const void>(in.data(), DType::f32, {std::int64_t{kBlocks} * kThreads}),
          detail::RegionUse::read);
    f.add("out", contiguous_view<void>(out.data(), DType::f32, {kBlocks}),
          detail::RegionUse::write);
    return f;
  }
};

// The findings of the GPU model running Body over `d`.
template <class Body>
std::vector<std::string> modelled(Data& d, std::uint64_t seed = 3) {
  kernels::gpu_model::Recorder recorder("block_sum", d.footprint());
  const BlockSumArgs args = d.args();
  kernels::gpu_model::run_recorded(recorder, HostExecutor(seed, 1), [&](const HostExecutor& e) {
    host::launch_phased<Body>(e, GridShape{kBlocks, kThreads}, args);
  });
  return recorder.findings();
}

TEST(BlockPhases, EveryThreadFinishesAPhaseBeforeAnyStartsTheNext) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    Data d;
    host::launch_phased<BlockSum<kThreads>>(HostExecutor(seed, 2), GridShape{kBlocks, kThreads},
                                            d.args());
    for (int b = 0; b < kBlocks; ++b)
      EXPECT_EQ(d.out[static_cast<std::size_t>(b)], d.expected(b)) << "seed " << seed;
  }
}

TEST(BlockPhases, TheModelFindsNothingInTheBarrieredSum) {
  Data d;
  EXPECT_TRUE(modelled<BlockSum<kThreads>>(d).empty());
  for (int b = 0; b < kBlocks; ++b) EXPECT_EQ(d.out[static_cast<std::size_t>(b)], d.expected(b));
}

TEST(BlockPhases, TheModelFindsTheSharedMemoryRaceOfAMissingBarrier) {
  Data d;
  const auto findings = modelled<BlockSum<kThreads, BlockSumFault::missing_barrier>>(d);
  ASSERT_FALSE(findings.empty()) << "a missing barrier went unseen";
  EXPECT_NE(findings[0].find("race: "), std::string::npos) << findings[0];
}

TEST(BlockPhases, TheModelFindsAnAccessPastTheSharedArray) {
  Data d;
  const auto findings = modelled<BlockSum<kThreads, BlockSumFault::past_shared_end>>(d);
  ASSERT_FALSE(findings.empty());
  EXPECT_NE(findings[0].find("out-of-bounds"), std::string::npos) << findings[0];
}

// A phased body whose thread t reads, in phase 1, the global element that thread t + 1 wrote
// in phase 0: ordered by the barrier, so not a race; the same in one phase is one.
struct NeighbourArgs {
  float* data = nullptr;
};
template <int kPhasesOfBody>
struct ReadNeighbour {
  static constexpr int kPhases = kPhasesOfBody;
  struct Shared {
    float unused;
  };
  static void phase(const NeighbourArgs& a, const kernels::GridCoord& g, int phase, Shared&) {
    const int t = g.thread;
    if (phase == 0) kernels::global_store(a.data + t, static_cast<float>(t));
    if (phase == kPhases - 1 && t + 1 < g.num_threads) (void)kernels::global_load(a.data + t + 1);
  }
};

template <class Body>
std::vector<std::string> neighbour_findings() {
  std::vector<float> data(kThreads);
  detail::Footprint f;
  f.add("data", contiguous_view<void>(data.data(), DType::f32, {kThreads}),
        detail::RegionUse::read_write);
  kernels::gpu_model::Recorder recorder("read_neighbour", f);
  const NeighbourArgs args{data.data()};
  kernels::gpu_model::run_recorded(recorder, HostExecutor(5, 1), [&](const HostExecutor& e) {
    host::launch_phased<Body>(e, GridShape{1, kThreads}, args);
  });
  return recorder.findings();
}

TEST(BlockPhases, ABarrierEndsTheRaceWindowOfGlobalMemory) {
  EXPECT_TRUE(neighbour_findings<ReadNeighbour<2>>().empty());
  const auto findings = neighbour_findings<ReadNeighbour<1>>();
  ASSERT_FALSE(findings.empty()) << "a read of a neighbour's store in the same phase went unseen";
  EXPECT_NE(findings[0].find("race: "), std::string::npos) << findings[0];
}

}  // namespace
}  // namespace mlarope::test
