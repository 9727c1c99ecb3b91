// The CUDA backend's stream, graph, memory and device query (see cuda_backend.h).
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "device/cuda_backend.h"
#include "device/cuda_launch.h"
#include "mlarope/error.h"

namespace mlarope::detail::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("mlarope CUDA: ") + what + ": " + cudaGetErrorString(e));
}

class CudaGraph;

class CudaStream final : public StreamImpl {
 public:
  CudaStream() {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    void* scratch = nullptr;
    check(cudaMalloc(&scratch, sizeof(DeviceStatus)), "cudaMalloc(scratch status)");
    scratch_ = static_cast<DeviceStatus*>(scratch);
    check(cudaMemsetAsync(scratch_, 0, sizeof(DeviceStatus), stream_), "cudaMemset(scratch)");
  }
  ~CudaStream() override {
    cudaStreamSynchronize(stream_);
    cudaFree(scratch_);
    cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  BackendKind kind() const override { return BackendKind::cuda; }
  LaunchProfile profile() const override { return cuda_launch_profile(); }
  DeviceStatus* scratch_status() override { return scratch_; }
  void clear_scratch_status() override {
    check(cudaMemsetAsync(scratch_, 0, sizeof(DeviceStatus), stream_), "cudaMemsetAsync");
  }
  void launch(const CuSeqlensCheckLaunch& l) override { run(l); }
  void launch(const RopeLaunch& l) override { run(l); }
  void launch(const KvSplitLaunch& l) override { run(l); }
  void launch(const KvSplitBackwardLaunch& l) override { run(l); }
  void launch(const YarnLaunch& l) override { run(l); }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  void begin_capture() override {
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "begin_capture");
    capturing_ = true;
  }
  std::unique_ptr<GraphImpl> end_capture() override;
  bool capturing() const override { return capturing_; }
  void* native_handle() const override { return static_cast<void*>(stream_); }

  /// The CUDA stream.
  cudaStream_t stream() const { return stream_; }

 private:
  template <class Launch>
  void run(const Launch& l) {
    cuda_launch::launch(l, stream_);
    check(cudaGetLastError(), "kernel launch");
  }

  cudaStream_t stream_ = nullptr;
  DeviceStatus* scratch_ = nullptr;
  bool capturing_ = false;
};

class CudaGraph final : public GraphImpl {
 public:
  CudaGraph(cudaGraph_t graph, cudaGraphExec_t exec) : graph_(graph), exec_(exec) {}
  ~CudaGraph() override {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void replay(StreamImpl& stream) override {
    auto* cuda = dynamic_cast<CudaStream*>(&stream);
    if (cuda == nullptr) throw Error("Graph::replay: a CUDA graph needs a CUDA stream");
    check(cudaGraphLaunch(exec_, cuda->stream()), "cudaGraphLaunch");
  }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
};

std::unique_ptr<GraphImpl> CudaStream::end_capture() {
  cudaGraph_t graph = nullptr;
  capturing_ = false;
  check(cudaStreamEndCapture(stream_, &graph), "end_capture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  if (e != cudaSuccess) cudaGraphDestroy(graph);
  check(e, "cudaGraphInstantiate");
  return std::make_unique<CudaGraph>(graph, exec);
}

}  // namespace

bool device_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::unique_ptr<StreamImpl> make_stream() {
  if (!device_available()) throw Error("Stream::cuda: no CUDA device is available");
  return std::make_unique<CudaStream>();
}

void* allocate(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

void release(void* p) noexcept { cudaFree(p); }

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
