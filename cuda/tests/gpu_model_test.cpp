// The GPU model's detectors catch what they are for (issue 10 point 5): each is shown a kernel
// that is wrong in the one way it must see (cuda/testing/kernel_faults.txt), and the same
// build without the fault passes the same call, so every test here can fail both ways.
//   - alignment: 16-byte copies chosen when only one of two tensors is aligned;
//   - bounds: a store one element past the end of an output;
//   - races: two threads writing one element;
//   - coalescing: a contiguous range of copies per thread lowers the sector efficiency;
//   - ASan + UBSan (build-asan only): a store one past the end of a per-thread local array.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "host/host_stream.h"
#include "mlarope/error.h"
#include "testing/faulty_host_stream.h"
#include "testing/model_calls.h"

namespace mlarope::test {
namespace {

using fault_injection::FaultyHostStream;
using fault_injection::KernelFault;

// The message of the mlarope::Error that `f` throws, or "" when it throws nothing.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

FaultyHostStream model_stream(KernelFault fault) { return FaultyHostStream(fault, 7, 1, true); }

TEST(GpuModelDetectors, AlignmentCatchesAVectorCopyWhenOnlyOneTensorIsAligned) {
  RopeBuffers b(/*misalign_t=*/true);
  const std::string faulty = error_of([&] { model_stream(KernelFault::vector_either_aligned).rope(b.call()); });
  EXPECT_NE(faulty.find("misaligned 16-byte"), std::string::npos) << faulty;
  EXPECT_EQ(error_of([&] { model_stream(KernelFault::none).rope(b.call()); }), "");
}

TEST(GpuModelDetectors, BoundsCatchAStorePastTheEndOfAnOutput) {
  KvSplitBuffers b;
  const std::string faulty = error_of([&] { model_stream(KernelFault::store_past_end).kv_split(b.call()); });
  EXPECT_NE(faulty.find("out-of-bounds store"), std::string::npos) << faulty;
  EXPECT_TRUE(b.guard_intact()) << "the model must not make a store it refuses";
  EXPECT_EQ(error_of([&] { model_stream(KernelFault::none).kv_split(b.call()); }), "");
}

TEST(GpuModelDetectors, RacesCatchTwoThreadsWritingOneElement) {
  RopeBuffers b(/*misalign_t=*/true);  // element copies of the nope parts (no vector path)
  const std::string faulty = error_of([&] { model_stream(KernelFault::shared_element).rope(b.call()); });
  EXPECT_NE(faulty.find("race: store of a byte that thread"), std::string::npos) << faulty;
  EXPECT_EQ(error_of([&] { model_stream(KernelFault::none).rope(b.call()); }), "");
}

TEST(GpuModelDetectors, RacesCatchTheStagedBodyWithoutItsBarrier) {
  RopeBuffers b(/*misalign_t=*/false);  // in place, MLA layouts, emb 64: the staged body
  const std::string faulty =
      error_of([&] { model_stream(KernelFault::staged_missing_barrier).rope_inplace(b.inplace_call()); });
  EXPECT_NE(faulty.find("rope/staged_vector/bf16"), std::string::npos) << faulty;
  EXPECT_NE(faulty.find("race: store of a byte that"), std::string::npos) << faulty;
  EXPECT_EQ(error_of([&] { model_stream(KernelFault::none).rope_inplace(b.inplace_call()); }), "");
}

TEST(GpuModelDetectors, CoalescingSeesAContiguousRangeOfCopiesPerThread) {
  // 16 heads of nope 120: 240 16-byte pieces of nope parts for 128 threads.
  RopeBuffers clean_buffers(false, 16, 120), ranged_buffers(false, 16, 120);
  FaultyHostStream clean = model_stream(KernelFault::none);
  FaultyHostStream ranged = model_stream(KernelFault::contiguous_copy_ranges);
  clean.rope(clean_buffers.call());
  ranged.rope(ranged_buffers.call());
  EXPECT_EQ(clean_buffers.out_bits(), ranged_buffers.out_bits()) << "the same values";
  const auto a = clean.model_stats().back(), b = ranged.model_stats().back();
  ASSERT_EQ(a.kernel, "rope/chunked_vector/bf16");
  EXPECT_EQ(a.requested_bytes, b.requested_bytes);
  std::cout << "  sector efficiency of " << a.kernel << ": clean " << a.sector_efficiency()
            << ", contiguous copy ranges " << b.sector_efficiency() << "\n";
  EXPECT_LT(b.sector_efficiency(), 0.9 * a.sector_efficiency());
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

TEST(GpuModelDetectors, AsanCatchesAStorePastALocalArray) {
  if (!kAsan) GTEST_SKIP() << "needs the AddressSanitizer build (ci/test.sh builds build-asan)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  RopeBuffers b(false);
  EXPECT_DEATH(
      {
        FaultyHostStream s(KernelFault::local_array_overflow, 0, 1);
        s.rope_inplace(b.inplace_call());
      },
      // ASan's report, or UBSan's object-size check, whichever sees the store first
      "stack-buffer-overflow|insufficient space for an object");
  FaultyHostStream clean(KernelFault::none, 0, 1);
  clean.rope_inplace(b.inplace_call());  // the unbroken build: no report, no abort
}

}  // namespace
}  // namespace mlarope::test
