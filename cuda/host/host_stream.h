// The host backend's stream and graph: launches run on the host grid executor as they are
// enqueued; while capturing they are recorded (arguments by value, pointers included) and a
// replay runs them again, reading what the buffers hold then, like a CUDA graph.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "host/host_executor.h"
#include "host/host_kernels.h"
#include "launch/stream_impl.h"

namespace mlarope::host {

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
  DeviceStatus* scratch_status() override { return &scratch_->word; }
  void clear_scratch_status() override;
  void launch(const detail::CuSeqlensCheckLaunch& l) override;
  void launch(const detail::RopeLaunch& l) override;
  void launch(const detail::KvSplitLaunch& l) override;
  void launch(const detail::KvSplitBackwardLaunch& l) override;
  void launch(const detail::YarnLaunch& l) override;
  void synchronize() override {}
  void begin_capture() override;
  std::unique_ptr<detail::GraphImpl> end_capture() override;
  bool capturing() const override { return capturing_; }

  /// Run `op` now, or record it while capturing.
  void submit(Operation op);

 protected:
  /// The kernel bodies this stream runs.
  const KernelTable& kernels() const { return *kernels_; }

 private:
  struct alignas(64) Scratch {
    DeviceStatus word = 0;
  };

  HostExecutor executor_;
  const KernelTable* kernels_;
  std::unique_ptr<Scratch> scratch_;
  bool capturing_ = false;
  std::vector<Operation> recorded_;
};

/// Launches recorded by a HostStream.
class HostGraph final : public detail::GraphImpl {
 public:
  /// A graph of `operations`, in order.
  explicit HostGraph(std::vector<HostStream::Operation> operations)
      : operations_(std::move(operations)) {}
  void replay(detail::StreamImpl& stream) override;

 private:
  std::vector<HostStream::Operation> operations_;
};

}  // namespace mlarope::host
