// SPDX-License-Identifier: Apache-2.0
// FaultyHostStream (see faulty_host_stream.h): a HostStream whose kernel table is the faulty
// build, with the fault selected around each launch it runs (and each replayed launch).
#include "test_support/faulty_host_stream.h"

#include <chrono>
#include <utility>

#include "host/host_stream.h"

namespace mlarope::host {
/// The kernel table of the faulty build (generated host_kernels.cpp, make_faulty_sources).
const KernelTable& faulty_kernel_table();
}  // namespace mlarope::host

namespace mlarope::fault_injection {

int g_kernel_fault = static_cast<int>(KernelFault::none);

namespace {

// Selects `fault` for the kernel bodies while it lives.
class FaultScope {
 public:
  explicit FaultScope(KernelFault fault) : saved_(g_kernel_fault) {
    g_kernel_fault = static_cast<int>(fault);
  }
  ~FaultScope() { g_kernel_fault = saved_; }
  FaultScope(const FaultScope&) = delete;
  FaultScope& operator=(const FaultScope&) = delete;

 private:
  int saved_;
};

// A host stream running the faulty kernel table. The fault is selected around each call
// and each replay (FaultyHostStream), where the launches run.
class FaultyStreamImpl final : public host::HostStream {
 public:
  FaultyStreamImpl(KernelFault fault, const HostStreamOptions& options)
      : HostStream(options, host::faulty_kernel_table()), fault_(fault) {}

  using HostStream::launch;
  // KernelFault::slow: rope out of place runs as always, then the stream spins for kSlowShare
  // of the time it took (the same result, that much slower). A wait proportional to the
  // launch's own time slows it the same on every machine and cache state; redoing part of the
  // work instead costs what the cache makes of it (from 4% to 19% on one machine).
  void launch(const detail::RopeLaunch& l) override {
    if (fault_ == KernelFault::slow && !l.args.in_place && !capturing()) {
      const auto start = std::chrono::steady_clock::now();
      HostStream::launch(l);
      const auto took = std::chrono::steady_clock::now() - start;
      const auto until =
          std::chrono::steady_clock::now() +
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(took * kSlowShare);
      while (std::chrono::steady_clock::now() < until) {
      }
      return;
    }
    detail::RopeLaunch changed = l;
    if (fault_ == KernelFault::vector_either_aligned)
      changed.args.copy_vector = aligned(l.args.in, l.dtype) || aligned(l.args.out, l.dtype);
    HostStream::launch(changed);
  }

 private:
  template <class Void>
  static bool aligned(const kernels::ActivationView<Void>& v, DType dtype) {
    const auto size = static_cast<std::int64_t>(dtype_size(dtype));
    return reinterpret_cast<std::uintptr_t>(v.data) % 16 == 0 && v.seq_stride * size % 16 == 0 &&
           v.batch_stride * size % 16 == 0 && v.head_stride * size % 16 == 0;
  }

 public:
 private:
  KernelFault fault_;
};

}  // namespace

FaultyHostStream::FaultyHostStream(KernelFault fault, std::uint64_t order_seed, int threads,
                                   bool gpu_model)
    : fault_(fault),
      stream_(std::make_shared<Stream>(Stream::from_impl(std::make_unique<FaultyStreamImpl>(
          fault, HostStreamOptions{order_seed, threads, gpu_model})))) {}

FaultyHostStream::~FaultyHostStream() = default;

void FaultyHostStream::rope(const RopeCall& call) {
  const FaultScope scope(fault_);
  mlarope::rope(call, *stream_);
}
void FaultyHostStream::rope_inplace(const RopeInplaceCall& call) {
  const FaultScope scope(fault_);
  mlarope::rope_inplace(call, *stream_);
}
void FaultyHostStream::rope_backward(const RopeBackwardCall& call) {
  const FaultScope scope(fault_);
  mlarope::rope_backward(call, *stream_);
}
void FaultyHostStream::rope_backward_inplace(const RopeBackwardInplaceCall& call) {
  const FaultScope scope(fault_);
  mlarope::rope_backward_inplace(call, *stream_);
}
void FaultyHostStream::kv_split(const KvSplitCall& call) {
  const FaultScope scope(fault_);
  mlarope::kv_split(call, *stream_);
}
void FaultyHostStream::kv_split_backward(const KvSplitBackwardCall& call) {
  const FaultScope scope(fault_);
  mlarope::kv_split_backward(call, *stream_);
}

void FaultyHostStream::begin_capture() { stream_->begin_capture(); }

std::function<void()> FaultyHostStream::end_capture() {
  auto graph = std::make_shared<Graph>(stream_->end_capture());
  return [stream = stream_, graph, fault = fault_] {
    const FaultScope scope(fault);
    graph->replay(*stream);
    stream->synchronize();
  };
}

bool FaultyHostStream::capturing() const { return stream_->capturing(); }

std::vector<kernels::gpu_model::LaunchStats> FaultyHostStream::model_stats() const {
  return dynamic_cast<const host::HostStream&>(stream_->impl()).model_stats();
}

}  // namespace mlarope::fault_injection
