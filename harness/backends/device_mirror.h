// SPDX-License-Identifier: Apache-2.0
// Device copies of the host memory behind a call's views (the CUDA backend and CUDA-memory
// kernel plugins of the harness run on them): each view's spanned bytes are copied over at the
// same offset modulo 256 (place_copy), outputs are copied back when the call finished.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "mlarope/backend.h"
#include "mlarope/ops.h"

namespace mlarope::harness {

/// Element range [low, high] that a view spans, relative to its data pointer.
inline std::pair<std::int64_t, std::int64_t> element_span(const ConstTensorView& v) {
  std::int64_t low = 0, high = 0;
  for (int i = 0; i < v.rank; ++i) {
    const std::int64_t span = (v.shape[i] - 1) * v.strides[i];
    (span < 0 ? low : high) += span;
  }
  return {low, high};
}

// Device copies of the host memory behind a call's views; outputs are copied back on finish.
class DeviceMirror {
 public:
  /// A device view of `v` (its spanned bytes copied over); `output` views are copied back.
  template <class Void>
  BasicTensorView<Void> mirror(BasicTensorView<Void> v, bool output) {
    if (v.data == nullptr || v.numel() == 0) return v;
    const auto [low, high] = element_span(v);
    const std::int64_t size = static_cast<std::int64_t>(dtype_size(v.dtype));
    const char* host = static_cast<const char*>(v.data) + low * size;
    const std::size_t bytes = static_cast<std::size_t>((high - low + 1) * size);
    v.data = static_cast<char*>(copy(host, bytes, output)) - low * size;
    return v;
  }
  /// A device copy of an index array.
  IndexView mirror(IndexView v) {
    if (!v.present() || v.size <= 0) return v;
    v.data = copy(v.data, static_cast<std::size_t>(v.size) * index_size(v.type), false);
    return v;
  }
  /// A device status word holding the host word's value; copied back on finish.
  DeviceStatus* mirror(DeviceStatus* status) {
    if (!status) return nullptr;
    return static_cast<DeviceStatus*>(copy(status, sizeof(DeviceStatus), true));
  }
  Rotation mirror(Rotation r) {
    r.cos = mirror(r.cos, false);
    r.sin = mirror(r.sin, false);
    return r;
  }
  Positions mirror(Positions p) {
    p.cu_seqlens = mirror(p.cu_seqlens);
    p.position_ids = mirror(p.position_ids);
    p.seq_offsets = mirror(p.seq_offsets);
    return p;
  }
  template <class Args>
  Args mirror_args(Args a) {
    a.rotation = mirror(a.rotation);
    a.positions = mirror(a.positions);
    a.status = mirror(a.status);
    return a;
  }
  /// Wait for the stream and copy the outputs back to host memory.
  void finish(Stream& stream) {
    stream.synchronize();
    copy_back();
  }
  /// Copy the outputs back to host memory (the device work must have finished).
  void copy_back() {
    for (const CopyBack& c : copy_back_) buffers_[c.buffer].copy_to_host(c.host, c.bytes, c.offset);
  }

 private:
  struct CopyBack {
    void* host;
    std::size_t bytes;
    std::size_t buffer;
    std::size_t offset;
  };

  // A device copy of `bytes` bytes at `host`, placed by place_copy; its device address.
  void* copy(const void* host, std::size_t bytes, bool output) {
    const CopyPlacement at = place_copy(host, bytes);
    buffers_.emplace_back(BackendKind::cuda, at.buffer_bytes);
    buffers_.back().copy_from_host(host, bytes, at.offset);
    if (output)
      copy_back_.push_back({const_cast<void*>(host), bytes, buffers_.size() - 1, at.offset});
    return static_cast<char*>(buffers_.back().data()) + at.offset;
  }
  std::vector<DeviceBuffer> buffers_;
  std::vector<CopyBack> copy_back_;
};

}  // namespace mlarope::harness
