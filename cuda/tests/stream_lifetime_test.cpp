// SPDX-License-Identifier: Apache-2.0
// A stream's resources under failure: a stream destroyed mid-capture (an exception between
// begin_capture and end_capture) leaves the backend usable, and with device memory exhausted
// the CUDA backend fails by name (mlarope::Error) and recovers.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "device/cuda_backend.h"
#include "mlarope/error.h"
#include "test_support/backend_cases.h"

namespace mlarope::test {
namespace {

class StreamLifetimeTest : public BackendTest {};

RopeCase thd_case() {
  RopeCase c;
  c.rows.layout = TokenLayout::thd;
  c.rows.cu_seqlens = cumulative({5, 7});
  c.rows.freq_mode = FreqMode::packed;
  c.name = "stream lifetime";
  return c;
}

// One THD call on a new stream of `backend`, checked against the reference.
::testing::AssertionResult a_new_stream_works(BackendKind backend) {
  return check_rope_case(thd_case(), backend, 7);
}

// CUDA: the thread's pending CUDA error, taken (empty: none; always empty on the host backend).
std::string pending_cuda_error(BackendKind backend) {
  return backend == BackendKind::cuda ? detail::cuda::take_last_error() : std::string();
}

TEST(HostStreamTest, HasNoNativeHandle) {  // backend.h: nullptr for a host stream
  EXPECT_EQ(Stream::host().native_handle(), nullptr);
  HostStreamOptions model;
  model.gpu_model = true;
  EXPECT_EQ(Stream::host(model).native_handle(), nullptr);
}

TEST_P(StreamLifetimeTest, AStreamDestroyedMidCaptureLeavesTheBackendUsable) {
  RopeHarness h(thd_case(), 1);
  h.upload(backend());
  EXPECT_THROW(
      {
        Stream stream = make_stream();
        stream.begin_capture();
        h.run_backend(stream);
        throw std::runtime_error("thrown between begin_capture and end_capture");
      },
      std::runtime_error);
  EXPECT_EQ(pending_cuda_error(backend()), "");
  EXPECT_TRUE(a_new_stream_works(backend()));
  EXPECT_EQ(pending_cuda_error(backend()), "");
}

TEST_P(StreamLifetimeTest, AStreamDestroyedMidCaptureWithNothingCapturedIsFine) {
  {
    Stream stream = make_stream();
    stream.begin_capture();
  }
  EXPECT_EQ(pending_cuda_error(backend()), "");
  EXPECT_TRUE(a_new_stream_works(backend()));
}

// Device memory, allocated in ever smaller pieces until none is left.
std::vector<DeviceBuffer> exhaust_device_memory() {
  std::vector<DeviceBuffer> held;
  for (std::size_t bytes = std::size_t{1} << 30; bytes >= 256; bytes /= 2) {
    for (;;) {
      try {
        held.emplace_back(BackendKind::cuda, bytes);
      } catch (const Error&) {
        break;
      }
    }
  }
  return held;
}

// A stream holds no device memory of its own (a THD call checks cu_seqlens inside its
// kernel): with device memory exhausted a stream is still had, or refused by name, and a
// further allocation is refused by name; once the memory is freed the device works.
TEST(CudaStreamTest, WithDeviceMemoryExhaustedTheBackendFailsByNameAndRecovers) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  {
    std::vector<DeviceBuffer> held = exhaust_device_memory();
    ASSERT_FALSE(held.empty());
    try {
      Stream stream = Stream::cuda();
      stream.synchronize();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("mlarope CUDA"), std::string::npos) << e.what();
    }
    try {
      DeviceBuffer one_more(BackendKind::cuda, std::size_t{1} << 20);
      ADD_FAILURE() << "a 1 MiB allocation succeeded with device memory exhausted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("mlarope CUDA"), std::string::npos) << e.what();
    }
  }  // the memory is freed here
  EXPECT_EQ(detail::cuda::take_last_error(), "");
  EXPECT_TRUE(a_new_stream_works(BackendKind::cuda));
}

MLAROPE_INSTANTIATE_BACKENDS(StreamLifetimeTest);

}  // namespace
}  // namespace mlarope::test
