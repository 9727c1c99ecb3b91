// The CUDA backend's stream, graph, memory and device query (see cuda_backend.h).
#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "device/cuda_backend.h"
#include "device/cuda_launch.h"
#include "launch/scratch_arena.h"
#include "mlarope/error.h"

namespace mlarope::detail::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("mlarope CUDA: ") + what + ": " + cudaGetErrorString(e));
}

// NOTE: allocating, freeing and synchronizing are illegal on a thread that is capturing in
// the (thread-local) mode of our captures; these calls, which do not enqueue work on the
// capturing stream, run with the thread's capture mode relaxed.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&previous_); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&previous_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
};

// Device memory for the scratch words of a capture (allocate may run while capturing).
DeviceStatus* allocate_words(std::size_t words) {
  RelaxedCaptureMode relaxed;
  void* p = nullptr;
  check(cudaMalloc(&p, words * sizeof(DeviceStatus)), "cudaMalloc(capture scratch)");
  return static_cast<DeviceStatus*>(p);
}
void release_words(DeviceStatus* block) noexcept {
  RelaxedCaptureMode relaxed;
  cudaFree(block);
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
  DeviceStatus* take_scratch_status() override {
    return capture_scratch_ ? capture_scratch_->take() : scratch_;
  }
  void clear_scratch_status(DeviceStatus* word) override {
    check(cudaMemsetAsync(word, 0, sizeof(DeviceStatus), stream_), "cudaMemsetAsync");
  }
  void launch(const CuSeqlensCheckLaunch& l) override { run(l); }
  void launch(const RopeLaunch& l) override { run(l); }
  void launch(const KvSplitLaunch& l) override { run(l); }
  void launch(const KvSplitBackwardLaunch& l) override { run(l); }
  void launch(const YarnLaunch& l) override { run(l); }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  void begin_capture() override {
    auto scratch = std::make_unique<ScratchArena>(allocate_words, release_words);
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "begin_capture");
    capture_scratch_ = std::move(scratch);
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
  std::unique_ptr<ScratchArena> capture_scratch_;  ///< the words of the captured calls
};

// An instantiated graph and the scratch words its nodes use. CUDA runs the launches of one
// graph one after the other; launching it is not thread-safe, hence the mutex.
class CudaGraph final : public GraphImpl {
 public:
  CudaGraph(cudaGraph_t graph, cudaGraphExec_t exec, cudaEvent_t last_replay,
            std::unique_ptr<ScratchArena> scratch)
      : graph_(graph), exec_(exec), last_replay_(last_replay), scratch_(std::move(scratch)) {}
  ~CudaGraph() override {
    RelaxedCaptureMode relaxed;
    cudaEventSynchronize(last_replay_);  // the last replay no longer uses the scratch words
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
    cudaEventDestroy(last_replay_);
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void replay(StreamImpl& stream) override {
    auto* cuda = dynamic_cast<CudaStream*>(&stream);
    if (cuda == nullptr) throw Error("Graph::replay: a CUDA graph needs a CUDA stream");
    const std::lock_guard<std::mutex> one_at_a_time(replaying_);
    check(cudaGraphLaunch(exec_, cuda->stream()), "cudaGraphLaunch");
    check(cudaEventRecord(last_replay_, cuda->stream()), "cudaEventRecord");
  }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  cudaEvent_t last_replay_;
  std::unique_ptr<ScratchArena> scratch_;
  std::mutex replaying_;
};

std::unique_ptr<GraphImpl> CudaStream::end_capture() {
  cudaGraph_t graph = nullptr;
  capturing_ = false;
  std::unique_ptr<ScratchArena> scratch = std::move(capture_scratch_);
  check(cudaStreamEndCapture(stream_, &graph), "end_capture");
  cudaGraphExec_t exec = nullptr;
  cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  if (e != cudaSuccess) cudaGraphDestroy(graph);
  check(e, "cudaGraphInstantiate");
  cudaEvent_t last_replay = nullptr;
  e = cudaEventCreateWithFlags(&last_replay, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  check(e, "cudaEventCreate");
  return std::make_unique<CudaGraph>(graph, exec, last_replay, std::move(scratch));
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
