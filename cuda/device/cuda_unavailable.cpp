// SPDX-License-Identifier: Apache-2.0
// The CUDA hooks of a build without CUDA: no device, and a clear error when one is asked for.
#include "device/cuda_backend.h"
#include "mlarope/error.h"

namespace mlarope::detail::cuda {
namespace {
[[noreturn]] void unavailable(const char* what) {
  throw Error(std::string(what) + ": this build of mlarope has no CUDA backend");
}
}  // namespace

bool device_available() { return false; }
std::unique_ptr<StreamImpl> make_stream() { unavailable("Stream::cuda"); }
std::size_t free_memory() { return 0; }
std::string take_last_error() { return {}; }
void* allocate(std::size_t) { unavailable("DeviceBuffer(cuda)"); }
void release(void*) noexcept {}
void copy_to_device(void*, const void*, std::size_t) {
  unavailable("DeviceBuffer::copy_from_host");
}
void copy_to_host(void*, const void*, std::size_t) { unavailable("DeviceBuffer::copy_to_host"); }
void fill_bytes(void*, unsigned char, std::size_t) { unavailable("DeviceBuffer::fill_bytes"); }

}  // namespace mlarope::detail::cuda
