// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's stream, graph, memory and device query (see cuda_backend.h).
#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <string>

#include "device/cuda_backend.h"
#include "device/cuda_launch.h"
#include "device/cuda_owners.h"
#include "mlarope/error.h"

namespace mlarope::detail::cuda {
namespace {

StreamOwner create_stream() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return StreamOwner(s);
}

DeviceMemoryOwner allocate_owned(std::size_t bytes, const char* what) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), what);
  return DeviceMemoryOwner(p);
}

EventOwner create_event() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return EventOwner(e);
}

class CudaStream final : public StreamImpl {
 public:
  CudaStream() : stream_(create_stream()) {}
  // NOTE: first end a capture in progress (synchronizing a capturing stream is illegal), then
  // wait for the eager work; the owner destroys the stream.
  ~CudaStream() override {
    discard_capture();
    RelaxedCaptureMode relaxed;
    cudaStreamSynchronize(stream_.get());
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  BackendKind kind() const override { return BackendKind::cuda; }
  LaunchProfile profile() const override { return cuda_launch_profile(); }
  void set_footprint(const Footprint&) override {}  // for the host's GPU model only
  void launch(const RopeLaunch& l) override { run(l); }
  void launch(const KvSplitLaunch& l) override { run(l); }
  void launch(const KvSplitBackwardLaunch& l) override { run(l); }
  void launch(const YarnLaunch& l) override { run(l); }
  void synchronize() override {
    check(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize");
  }
  void begin_capture() override;
  std::unique_ptr<GraphImpl> end_capture() override;
  bool capturing() const override { return capturing_; }
  void* native_handle() const override { return static_cast<void*>(stream_.get()); }

  /// The CUDA stream.
  cudaStream_t stream() const { return stream_.get(); }

 private:
  template <class Launch>
  void run(const Launch& l) {
    cuda_launch::launch(l, stream_.get());
    check(cudaGetLastError(), "kernel launch");
  }
  /// End a capture in progress and drop what it recorded (never throws).
  void discard_capture() noexcept;

  StreamOwner stream_;
  bool capturing_ = false;
};

// An instantiated graph. CUDA runs the launches of one graph one after the other; launching it
// is not thread-safe, hence the mutex.
class CudaGraph final : public GraphImpl {
 public:
  CudaGraph(GraphOwner graph, GraphExecOwner exec)
      : graph_(std::move(graph)), exec_(std::move(exec)), last_replay_(create_event()) {}
  // NOTE: the graph is destroyed only after its last replay ended.
  ~CudaGraph() override {
    RelaxedCaptureMode relaxed;
    cudaEventSynchronize(last_replay_.get());
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void replay(StreamImpl& stream) override {
    auto* cuda = dynamic_cast<CudaStream*>(&stream);
    if (cuda == nullptr) throw Error("Graph::replay: a CUDA graph needs a CUDA stream");
    const std::lock_guard<std::mutex> one_at_a_time(replaying_);
    check(cudaGraphLaunch(exec_.get(), cuda->stream()), "cudaGraphLaunch");
    check(cudaEventRecord(last_replay_.get(), cuda->stream()), "cudaEventRecord");
  }

 private:
  GraphOwner graph_;
  GraphExecOwner exec_;
  EventOwner last_replay_;
  std::mutex replaying_;
};

void CudaStream::begin_capture() {
  if (capturing()) throw Error("begin_capture: the stream is already capturing");
  check(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal), "begin_capture");
  capturing_ = true;
}

std::unique_ptr<GraphImpl> CudaStream::end_capture() {
  if (!capturing()) throw Error("end_capture: the stream is not capturing");
  capturing_ = false;
  cudaGraph_t captured = nullptr;
  check(cudaStreamEndCapture(stream_.get(), &captured), "end_capture");
  GraphOwner graph(captured);
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, graph.get(), 0), "cudaGraphInstantiate");
  return std::make_unique<CudaGraph>(std::move(graph), GraphExecOwner(exec));
}

void CudaStream::discard_capture() noexcept {
  if (!capturing()) return;
  cudaGraph_t captured = nullptr;
  cudaStreamEndCapture(stream_.get(), &captured);  // fails for an invalidated capture: no graph
  GraphOwner dropped(captured);
  cudaGetLastError();  // the capture's error, if any, is not the next call's
  capturing_ = false;
}

}  // namespace

bool device_available() {
  int count = 0;
  const bool found = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  if (!found) cudaGetLastError();
  return found;
}

std::unique_ptr<StreamImpl> make_stream() {
  if (!device_available()) throw Error("Stream::cuda: no CUDA device is available");
  return std::make_unique<CudaStream>();
}

std::size_t free_memory() {
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

std::string take_last_error() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : cudaGetErrorString(e);
}

void* allocate(std::size_t bytes) { return allocate_owned(bytes, "cudaMalloc").release(); }

void release(void* p) noexcept { DeviceMemoryOwner::deleter_type{}(p); }
// NOTE: our streams are non-blocking, so they do not wait for the legacy default stream on
// which cudaMemcpy / cudaMemset run (and a pageable host-to-device cudaMemcpy may return
// before its DMA ends): synchronize, so the copy is complete for every stream.
void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after a copy to the device");
}

void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

void fill_bytes(void* dst, unsigned char value, std::size_t bytes) {
  check(cudaMemset(dst, value, bytes), "cudaMemset");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemset");
}

}  // namespace mlarope::detail::cuda
