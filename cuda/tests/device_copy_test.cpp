// SPDX-License-Identifier: Apache-2.0
// Device copies of host memory keep the host address modulo 256 (cudaMalloc's alignment), so
// that a misaligned or odd-offset view of a test reaches the kernels as such.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "test_support/backend_test_util.h"

namespace mlarope::test {
namespace {

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(PlaceCopyTest, ACopyKeepsTheHostAddressModulo256) {
  const std::uintptr_t device = 0x7f0000000000;  // a buffer as cudaMalloc returns it
  for (std::uintptr_t host : {0x1000u, 0x1001u, 0x1002u, 0x1040u, 0x10ffu, 0x1100u, 0x1181u})
    for (std::size_t bytes : {0u, 1u, 2u, 1000u}) {
      const CopyPlacement at = place_copy(reinterpret_cast<const void*>(host), bytes);
      EXPECT_EQ((device + at.offset) % 256, host % 256) << std::hex << host;
      EXPECT_GE(at.buffer_bytes, at.offset + bytes);
      EXPECT_LE(at.buffer_bytes, bytes + 255);
    }
}

class DeviceCopyTest : public BackendTest {};

TEST_P(DeviceCopyTest, DeviceBuffersAre256ByteAligned) {
  for (std::size_t bytes : {1u, 3u, 1000u}) {
    DeviceBuffer b(backend(), bytes);
    EXPECT_EQ(address(b.data()) % 256, 0u);
  }
}

TEST_P(DeviceCopyTest, TestTensorsKeepTheirHostAddressModulo256OnTheDevice) {
  std::vector<Tensor> tensors;
  for (std::int64_t n : {1, 3, 7, 40, 333, 5000})
    tensors.emplace_back(DType::bf16, std::vector<std::int64_t>{n});
  for (Tensor& t : tensors) {
    t.upload(backend());
    EXPECT_EQ(address(t.device_view().data) % 256, address(t.host_view().data) % 256);
  }
  IndexArray cu({0, 3, 5});
  cu.upload(backend());
  EXPECT_EQ(address(cu.device_view().data) % 256, address(cu.host_view().data) % 256);
}

TEST_P(DeviceCopyTest, ACopyRoundTripsAtItsOffset) {
  Tensor t(DType::f32, {5, 3});
  Rng rng(1);
  t.fill_uniform(rng);
  const std::vector<unsigned char> before = t.storage();
  t.upload(backend());
  t.download();
  EXPECT_EQ(t.storage(), before);
}

MLAROPE_INSTANTIATE_BACKENDS(DeviceCopyTest);

}  // namespace
}  // namespace mlarope::test
