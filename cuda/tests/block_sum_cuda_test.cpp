// SPDX-License-Identifier: Apache-2.0
// The phased block sum (test_support/block_sum.h: __shared__ + __syncthreads() on the GPU) on a
// CUDA device: each block's sum is exact. ci/gpu-check.sh runs this binary under
// compute-sanitizer's racecheck and synccheck too.
#include <gtest/gtest.h>

#include <vector>

#include "tests/block_sum_kernel.h"

namespace mlarope::test {
namespace {

using namespace test_kernels;

TEST(BlockSumOnDevice, EveryBlockSumsItsThreadsExactly) {
  if (!block_sum_device_present())
    GTEST_SKIP() << "no CUDA device here: the phased kernel runs where one is present";
  const int threads = block_sum_threads(), blocks = 37;
  std::vector<float> in(static_cast<std::size_t>(blocks * threads));
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 97);  // exact sums
  const std::vector<float> out = block_sums_on_device(in);
  ASSERT_EQ(out.size(), static_cast<std::size_t>(blocks));
  for (int b = 0; b < blocks; ++b) {
    float expected = 0;
    for (int t = 0; t < threads; ++t)
      expected += in[static_cast<std::size_t>(b) * threads + static_cast<std::size_t>(t)];
    EXPECT_EQ(out[static_cast<std::size_t>(b)], expected) << "block " << b;
  }
}

}  // namespace
}  // namespace mlarope::test
