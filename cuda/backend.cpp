// SPDX-License-Identifier: Apache-2.0
// Streams, graphs and device buffers of include/mlarope/backend.h.
#include "mlarope/backend.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "device/cuda_backend.h"
#include "host/host_stream.h"
#include "mlarope/error.h"

namespace mlarope {

std::string_view to_string(BackendKind kind) { return kind == BackendKind::host ? "host" : "cuda"; }

bool cuda_device_available() { return detail::cuda::device_available(); }

Stream::Stream(std::unique_ptr<detail::StreamImpl> impl) : impl_(std::move(impl)) {}
Stream::Stream(Stream&&) noexcept = default;
Stream& Stream::operator=(Stream&&) noexcept = default;
Stream::~Stream() = default;

Stream Stream::host(const HostStreamOptions& options) {
  return Stream(std::make_unique<host::HostStream>(options));
}

Stream Stream::cuda() { return Stream(detail::cuda::make_stream()); }

Stream Stream::create(BackendKind kind) { return kind == BackendKind::host ? host() : cuda(); }

std::vector<ModelLaunchStats> take_model_stats(Stream& stream) {
  auto* host = dynamic_cast<host::HostStream*>(&stream.impl());
  return host ? host->take_model_stats() : std::vector<ModelLaunchStats>{};
}

std::vector<std::string> model_kernel_paths() { return host::kernel_paths(); }

Stream Stream::from_impl(std::unique_ptr<detail::StreamImpl> impl) {
  return Stream(std::move(impl));
}

BackendKind Stream::kind() const { return impl_->kind(); }
void Stream::synchronize() { impl_->synchronize(); }
void Stream::begin_capture() { impl_->begin_capture(); }
Graph Stream::end_capture() { return Graph(impl_->end_capture(), impl_->kind()); }
bool Stream::capturing() const { return impl_->capturing(); }
void* Stream::native_handle() const { return impl_->native_handle(); }

Graph::Graph(std::unique_ptr<detail::GraphImpl> impl, BackendKind kind)
    : impl_(std::move(impl)), kind_(kind) {}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
Graph::~Graph() = default;

void Graph::replay(Stream& stream) {
  if (stream.kind() != kind_)
    throw Error("Graph::replay: a " + std::string(to_string(kind_)) + " graph cannot run on a " +
                std::string(to_string(stream.kind())) + " stream");
  if (stream.capturing())
    throw Error(
        "Graph::replay: the stream is capturing; a graph cannot be replayed into a capture");
  impl_->replay(stream.impl());
}

DeviceBuffer::DeviceBuffer(BackendKind kind, std::size_t bytes) : bytes_(bytes), kind_(kind) {
  if (bytes == 0) return;
  if (kind == BackendKind::cuda) {
    data_ = detail::cuda::allocate(bytes);
    return;
  }
  // Exactly `bytes` (not rounded up), so that sanitizers see any access past the end.
  if (posix_memalign(&data_, kDeviceBufferAlignment, bytes) != 0) throw std::bad_alloc();
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_), kind_(other.kind_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    bytes_ = other.bytes_;
    kind_ = other.kind_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() noexcept {
  if (data_ == nullptr) return;
  if (kind_ == BackendKind::cuda) detail::cuda::release(data_);
  else std::free(data_);
  data_ = nullptr;
}

namespace {
void check_range(std::size_t offset, std::size_t bytes, std::size_t size, const char* what) {
  if (offset > size || bytes > size - offset)
    throw Error(std::string(what) + ": bytes [" + std::to_string(offset) + ", " +
                std::to_string(offset + bytes) + ") outside the buffer of " + std::to_string(size) +
                " bytes");
}
}  // namespace

void DeviceBuffer::copy_from_host(const void* src, std::size_t bytes, std::size_t offset) {
  check_range(offset, bytes, bytes_, "DeviceBuffer::copy_from_host");
  if (bytes == 0) return;
  char* dst = static_cast<char*>(data_) + offset;
  if (kind_ == BackendKind::cuda) detail::cuda::copy_to_device(dst, src, bytes);
  else std::memcpy(dst, src, bytes);
}

void DeviceBuffer::copy_to_host(void* dst, std::size_t bytes, std::size_t offset) const {
  check_range(offset, bytes, bytes_, "DeviceBuffer::copy_to_host");
  if (bytes == 0) return;
  const char* src = static_cast<const char*>(data_) + offset;
  if (kind_ == BackendKind::cuda) detail::cuda::copy_to_host(dst, src, bytes);
  else std::memcpy(dst, src, bytes);
}

CopyPlacement place_copy(const void* host, std::size_t bytes) {
  const std::size_t offset = reinterpret_cast<std::uintptr_t>(host) % kDeviceBufferAlignment;
  return {offset, offset + bytes};
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  if (bytes_ == 0) return;
  if (kind_ == BackendKind::cuda) detail::cuda::fill_bytes(data_, value, bytes_);
  else std::memset(data_, value, bytes_);
}

}  // namespace mlarope
