#include "backends/device_backend.h"

#include <memory>
#include <vector>

#include "mlarope/error.h"
#include "mlarope/validate.h"

namespace mlarope::harness {
namespace {

// Run `op(call, stream)` and wait for it, except while capturing (a graph records it).
template <class Call, class Op>
std::function<void(const Call&)> on_stream(std::shared_ptr<Stream> stream, Op op) {
  return [stream, op](const Call& call) {
    op(call, *stream);
    if (!stream->capturing()) stream->synchronize();
  };
}

// ---- CUDA: mirror the memory of each view on the device --------------------------------

// Element range [low, high] that a view spans, relative to its data pointer.
std::pair<std::int64_t, std::int64_t> element_span(const ConstTensorView& v) {
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
    if (output) copy_back_.push_back({const_cast<void*>(host), bytes, buffers_.size() - 1, at.offset});
    return static_cast<char*>(buffers_.back().data()) + at.offset;
  }
  std::vector<DeviceBuffer> buffers_;
  std::vector<CopyBack> copy_back_;
};

}  // namespace

Backend host_backend(std::uint64_t order_seed, HostMode mode) {
  HostStreamOptions options;
  options.seed = order_seed;
  options.gpu_model = mode == HostMode::gpu_model;
  auto stream = std::make_shared<Stream>(Stream::host(options));
  Backend b;
  b.name = mode == HostMode::gpu_model ? "host" : "host-fast";
  b.rope = on_stream<RopeCall>(stream, [](const RopeCall& c, Stream& s) { mlarope::rope(c, s); });
  b.rope_inplace = on_stream<RopeInplaceCall>(
      stream, [](const RopeInplaceCall& c, Stream& s) { mlarope::rope_inplace(c, s); });
  b.rope_backward = on_stream<RopeBackwardCall>(
      stream, [](const RopeBackwardCall& c, Stream& s) { mlarope::rope_backward(c, s); });
  b.rope_backward_inplace = on_stream<RopeBackwardInplaceCall>(
      stream, [](const RopeBackwardInplaceCall& c, Stream& s) { mlarope::rope_backward_inplace(c, s); });
  b.kv_split = on_stream<KvSplitCall>(
      stream, [](const KvSplitCall& c, Stream& s) { mlarope::kv_split(c, s); });
  b.kv_split_backward = on_stream<KvSplitBackwardCall>(
      stream, [](const KvSplitBackwardCall& c, Stream& s) { mlarope::kv_split_backward(c, s); });
  b.with_order_seed = [mode](std::uint64_t seed) { return host_backend(seed, mode); };
  b.take_model_stats = [stream] { return take_model_stats(*stream); };
  b.capture = [stream](const std::function<void()>& launches) -> std::function<void()> {
    stream->begin_capture();
    try {
      launches();
    } catch (...) {
      stream->end_capture();
      throw;
    }
    auto graph = std::make_shared<Graph>(stream->end_capture());
    return [stream, graph] {
      graph->replay(*stream);
      stream->synchronize();
    };
  };
  return b;
}

Backend cuda_backend() {
  if (!cuda_device_available()) throw Error("--backend cuda: no CUDA device is available here");
  auto stream = std::make_shared<Stream>(Stream::cuda());
  Backend b;
  b.name = "cuda";
  b.rope = [stream](const RopeCall& c) {
    validate(c);  // on the host views: overlap and the rest judged as the caller gave them
    DeviceMirror m;
    RopeCall d{m.mirror(c.t, false), m.mirror(c.out, true), m.mirror_args(c.args)};
    mlarope::rope(d, *stream);
    m.finish(*stream);
  };
  b.rope_inplace = [stream](const RopeInplaceCall& c) {
    validate(c);  // on the host views: overlap and the rest judged as the caller gave them
    DeviceMirror m;
    RopeInplaceCall d{m.mirror(c.t, true), m.mirror_args(c.args)};
    mlarope::rope_inplace(d, *stream);
    m.finish(*stream);
  };
  b.rope_backward = [stream](const RopeBackwardCall& c) {
    validate(c);  // on the host views: overlap and the rest judged as the caller gave them
    DeviceMirror m;
    RopeBackwardCall d{m.mirror(c.grad_out, false), m.mirror(c.grad_t, true), m.mirror_args(c.args)};
    mlarope::rope_backward(d, *stream);
    m.finish(*stream);
  };
  b.rope_backward_inplace = [stream](const RopeBackwardInplaceCall& c) {
    validate(c);  // on the host views: overlap and the rest judged as the caller gave them
    DeviceMirror m;
    RopeBackwardInplaceCall d{m.mirror(c.grad, true), m.mirror_args(c.args)};
    mlarope::rope_backward_inplace(d, *stream);
    m.finish(*stream);
  };
  b.kv_split = [stream](const KvSplitCall& c) {
    validate(c);  // on the host views: overlap and the rest judged as the caller gave them
    DeviceMirror m;
    KvSplitCall d{m.mirror(c.kv, false), m.mirror(c.k_pe, false), m.mirror(c.key, true),
                  m.mirror(c.value, true), m.mirror_args(c.args)};
    mlarope::kv_split(d, *stream);
    m.finish(*stream);
  };
  b.kv_split_backward = [stream](const KvSplitBackwardCall& c) {
    validate(c);  // on the host views: overlap and the rest judged as the caller gave them
    DeviceMirror m;
    KvSplitBackwardCall d{m.mirror(c.grad_key, false), m.mirror(c.grad_value, false),
                          m.mirror(c.grad_kv, true), m.mirror(c.grad_k_pe, true), m.mirror_args(c.args)};
    mlarope::kv_split_backward(d, *stream);
    m.finish(*stream);
  };
  return b;
}

}  // namespace mlarope::harness
