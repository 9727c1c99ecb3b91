// SPDX-License-Identifier: Apache-2.0
// The checks' guards trap reads in AddressSanitizer builds (harness/checks/asan_guards.h): a
// host fast-mode branch that reads the byte past each head's rope slice
// (KernelFault::fast_slice_overread, an edit of rope_on_host) stops with ASan's report and the
// name of the tensor whose gap it read, and its unbroken build passes the same run. Elsewhere
// the test skips: without ASan the read is of a NaN pattern whose value is dropped.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "checks/asan_guards.h"
#include "checks/strided_call.h"
#include "fuzz/broken_kernels.h"

namespace mlarope::props {
namespace {

using fault_injection::KernelFault;

// rope, SBHD [3, 1, 2, 12] f32 (nope 4, emb 8), f32 tables of 3 rows, MLA layouts.
harness::Case small_rope_case() {
  harness::Case c;
  harness::CaseConfig& k = c.config;
  k.op = mlarope::Op::rope;
  k.layout = TokenLayout::sbhd;
  k.dtype = k.table_dtype = DType::f32;
  k.nope_dim = 4;
  k.emb_dim = 8;
  k.in_layout = PairLayout::interleaved;
  k.out_layout = k.table_layout = PairLayout::half;
  const auto f32_array = [](std::vector<std::int64_t> shape, float scale) {
    npy::Array a = npy::make(npy::Dtype::f32, std::move(shape));
    for (std::int64_t i = 0; i < a.size(); ++i) {
      const float v = scale * static_cast<float>((i * 37) % 17 - 8) / 8.0f;
      std::memcpy(&a.bytes[static_cast<std::size_t>(i) * 4], &v, 4);
    }
    return a;
  };
  c.arrays["t"] = f32_array({3, 1, 2, 12}, 1.0f);
  c.arrays["cos"] = f32_array({3, 8}, 0.6f);
  c.arrays["sin"] = f32_array({3, 8}, 0.8f);
  return c;
}

TEST(AsanGuards, AFastModeReadPastARopeSliceStopsWithTheTensorNamed) {
  if (!harness::asan_guards::enabled())
    GTEST_SKIP() << "needs the AddressSanitizer build (ci/test.sh builds build-asan)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const harness::Case c = small_rope_case();
  harness::LayoutPlan plan;
  plan.head_gap = 4;  // the byte past a head's slice is a gap's (the last head's: the guard's)
  EXPECT_DEATH(
      harness::run_strided(c, faulty_kernel_backend(KernelFault::fast_slice_overread, 0, false),
                           plan, false),
      "AddressSanitizer: use-after-poison.*mlarope: the bad access is in the guarded storage of "
      "tensor 't'");
  const harness::RunResult clean =
      harness::run_strided(c, faulty_kernel_backend(KernelFault::none, 0, false), plan, false);
  EXPECT_EQ(clean.error, "");
  EXPECT_TRUE(clean.findings.empty());
}

}  // namespace
}  // namespace mlarope::props
