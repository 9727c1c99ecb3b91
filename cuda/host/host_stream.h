// SPDX-License-Identifier: Apache-2.0
// The host backend's stream and graph: launches run on the host grid executor as they are
// enqueued; while capturing they are recorded (arguments by value, pointers included) and a
// replay runs them again, reading what the buffers hold then, like a CUDA graph.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "host/gpu_model.h"
#include "host/host_executor.h"
#include "host/host_kernels.h"
#include "launch/stream_impl.h"

namespace mlarope::host {

/// The names HostStream gives its launches under the GPU model (mlarope::model_kernel_paths).
std::vector<std::string> kernel_paths();

/// A host-backend stream.
class HostStream : public detail::StreamImpl {
 public:
  /// One enqueued operation, run on the executor of the stream that runs it.
  using Operation = std::function<void(const HostExecutor&)>;

  /// A stream whose executor draws orders from options.seed on options.threads workers and
  /// runs the kernel bodies of `kernels` (the production build unless a test says otherwise).
  explicit HostStream(const HostStreamOptions& options,
                      const KernelTable& kernels = kernel_table());

  BackendKind kind() const override { return BackendKind::host; }
  detail::LaunchProfile profile() const override;
  void launch(const detail::RopeLaunch& l) override;
  void launch(const detail::KvSplitLaunch& l) override;
  void launch(const detail::KvSplitBackwardLaunch& l) override;
  void launch(const detail::YarnLaunch& l) override;
  void set_footprint(const detail::Footprint& footprint) override;
  void synchronize() override {}
  void begin_capture() override;
  std::unique_ptr<detail::GraphImpl> end_capture() override;
  bool capturing() const override { return capturing_; }
  void* native_handle() const override { return nullptr; }  // no native stream on the host

  /// Run `op` now, or record it while capturing.
  void submit(Operation op);

  /// True for a stream of the GPU model (HostStreamOptions::gpu_model).
  bool gpu_model() const { return gpu_model_; }
  /// What the GPU model measured of each launch so far (empty in fast mode).
  const std::vector<kernels::gpu_model::LaunchStats>& model_stats() const { return *model_stats_; }
  /// model_stats(), emptied.
  std::vector<kernels::gpu_model::LaunchStats> take_model_stats() {
    return std::exchange(*model_stats_, {});
  }

 protected:
  /// The kernel bodies this stream runs.
  const KernelTable& kernels() const { return *kernels_; }
  /// Enqueue `run(executor, l)`, named `kernel`; under the GPU model when this stream is one.
  template <class Launch>
  void submit_launch(std::string kernel, void (*run)(const HostExecutor&, const Launch&),
                     const Launch& l, int repeats = 1);

 private:
  HostExecutor executor_;
  const KernelTable* kernels_;
  bool gpu_model_ = false;
  std::int64_t model_block_stride_ = 1;
  detail::Footprint footprint_;
  std::shared_ptr<std::vector<kernels::gpu_model::LaunchStats>> model_stats_;
  bool capturing_ = false;
  std::vector<Operation> recorded_;
};

/// Throws mlarope::Error when `grid` is not a launch configuration a GPU accepts: 1 to 2^31 - 1
/// blocks of 1 to 1024 threads (the host executor would quietly run nothing for 0 threads;
/// CUDA fails the launch with cudaErrorInvalidConfiguration).
void check_launch_configuration(const std::string& kernel, const kernels::GridShape& grid);

/// Throws mlarope::Error listing what the GPU model found in a launch (if anything).
void throw_model_findings(const kernels::gpu_model::Recorder& recorder);

template <class Launch>
void HostStream::submit_launch(std::string kernel, void (*run)(const HostExecutor&, const Launch&),
                               const Launch& l, int repeats) {
  if (!gpu_model_) {
    submit([run, l, repeats](const HostExecutor& e) {
      for (int i = 0; i < repeats; ++i) run(e, l);
    });
    return;
  }
  check_launch_configuration(kernel, l.grid);  // what cudaLaunchKernel would refuse
  submit([run, l, repeats, kernel = std::move(kernel), footprint = footprint_,
          stride = model_block_stride_, stats = model_stats_](const HostExecutor& e) {
    for (int i = 0; i < repeats; ++i) {
      kernels::gpu_model::Recorder recorder(kernel, footprint, stride);
      kernels::gpu_model::run_recorded(recorder, e, [&](const HostExecutor& r) { run(r, l); });
      stats->push_back(recorder.stats());
      throw_model_findings(recorder);
    }
  });
}

/// Launches recorded by a HostStream.
class HostGraph final : public detail::GraphImpl {
 public:
  /// A graph of `operations`, in order.
  explicit HostGraph(std::vector<HostStream::Operation> operations)
      : operations_(std::move(operations)) {}
  void replay(detail::StreamImpl& stream) override;

 private:
  std::vector<HostStream::Operation> operations_;
  std::mutex replaying_;  ///< one replay at a time, like the launches of one CUDA graph
};

}  // namespace mlarope::host
