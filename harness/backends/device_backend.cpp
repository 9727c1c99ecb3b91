// SPDX-License-Identifier: Apache-2.0
#include "backends/device_backend.h"

#include <memory>
#include <vector>

#include "backends/device_mirror.h"
#include "mlarope/error.h"
#include "mlarope/validate.h"

namespace mlarope::harness {
namespace {

// Run `op(call, stream)` and wait for it, except while capturing (a graph records it).
template <class Call, class Op>
std::function<void(const Call&)> on_stream(const std::shared_ptr<Stream>& stream, Op op) {
  return [stream, op](const Call& call) {
    op(call, *stream);
    if (!stream->capturing()) stream->synchronize();
  };
}

}  // namespace

Backend host_backend(std::uint64_t order_seed, HostMode mode, std::int64_t model_block_stride) {
  HostStreamOptions options;
  options.seed = order_seed;
  options.gpu_model = mode == HostMode::gpu_model;
  options.model_block_stride = model_block_stride;
  auto stream = std::make_shared<Stream>(Stream::host(options));
  Backend b;
  b.name = mode == HostMode::gpu_model ? "host" : "host-fast";
  b.rope = on_stream<RopeCall>(stream, [](const RopeCall& c, Stream& s) { mlarope::rope(c, s); });
  b.rope_inplace = on_stream<RopeInplaceCall>(stream, [](const RopeInplaceCall& c, Stream& s) {
    mlarope::rope_inplace(c, s);
  });
  b.rope_backward = on_stream<RopeBackwardCall>(stream, [](const RopeBackwardCall& c, Stream& s) {
    mlarope::rope_backward(c, s);
  });
  b.rope_backward_inplace =
      on_stream<RopeBackwardInplaceCall>(stream, [](const RopeBackwardInplaceCall& c, Stream& s) {
        mlarope::rope_backward_inplace(c, s);
      });
  b.kv_split = on_stream<KvSplitCall>(stream, [](const KvSplitCall& c, Stream& s) {
    mlarope::kv_split(c, s);
  });
  b.kv_split_backward = on_stream<KvSplitBackwardCall>(
      stream, [](const KvSplitBackwardCall& c, Stream& s) { mlarope::kv_split_backward(c, s); });
  b.yarn_tables = on_stream<YarnTablesCall>(stream, [](const YarnTablesCall& c, Stream& s) {
    mlarope::yarn_tables(c, s);
  });
  b.with_order_seed = [mode, model_block_stride](std::uint64_t seed) {
    return host_backend(seed, mode, model_block_stride);
  };
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
    RopeBackwardCall d{m.mirror(c.grad_out, false), m.mirror(c.grad_t, true),
                       m.mirror_args(c.args)};
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
                          m.mirror(c.grad_kv, true), m.mirror(c.grad_k_pe, true),
                          m.mirror_args(c.args)};
    mlarope::kv_split_backward(d, *stream);
    m.finish(*stream);
  };
  b.yarn_tables = [stream](const YarnTablesCall& c) {
    validate(c);
    DeviceMirror m;
    YarnTablesCall d = c;
    d.cos = m.mirror(c.cos, true);
    d.sin = m.mirror(c.sin, true);
    mlarope::yarn_tables(d, *stream);
    m.finish(*stream);
  };
  return b;
}

}  // namespace mlarope::harness
