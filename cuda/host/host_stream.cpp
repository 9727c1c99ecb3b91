// The host backend's stream and graph (see host_stream.h).
#include "host/host_stream.h"

#include "host/host_kernels.h"
#include "mlarope/error.h"

namespace mlarope::host {

HostStream::HostStream(const HostStreamOptions& options, const KernelTable& kernels)
    : executor_(options.seed, options.threads),
      kernels_(&kernels),
      scratch_(std::make_unique<Scratch>()) {}

detail::LaunchProfile HostStream::profile() const {
  // Few threads per block: each host "thread" is a function call, so fewer, larger work
  // items amortise the row bookkeeping (freq_row, table loads) best.
  detail::LaunchProfile p;
  p.max_threads = 8;
  p.thread_granularity = 1;
  p.max_blocks = std::int64_t{1} << 20;
  return p;
}

void HostStream::submit(Operation op) {
  if (capturing_) recorded_.push_back(std::move(op));
  else op(executor_);
}

void HostStream::clear_scratch_status() {
  DeviceStatus* word = &scratch_->word;
  submit([word](const HostExecutor&) { *word = kStatusOk; });
}

void HostStream::launch(const detail::CuSeqlensCheckLaunch& l) {
  submit([l, run = kernels_->cu_seqlens_check](const HostExecutor& e) { run(e, l); });
}
void HostStream::launch(const detail::RopeLaunch& l) {
  submit([l, run = kernels_->rope](const HostExecutor& e) { run(e, l); });
}
void HostStream::launch(const detail::KvSplitLaunch& l) {
  submit([l, run = kernels_->kv_split](const HostExecutor& e) { run(e, l); });
}
void HostStream::launch(const detail::KvSplitBackwardLaunch& l) {
  submit([l, run = kernels_->kv_split_backward](const HostExecutor& e) { run(e, l); });
}
void HostStream::launch(const detail::YarnLaunch& l) {
  submit([l, run = kernels_->yarn](const HostExecutor& e) { run(e, l); });
}

void HostStream::begin_capture() {
  if (capturing_) throw Error("begin_capture: the stream is already capturing");
  capturing_ = true;
  recorded_.clear();
}

std::unique_ptr<detail::GraphImpl> HostStream::end_capture() {
  if (!capturing_) throw Error("end_capture: the stream is not capturing");
  capturing_ = false;
  return std::make_unique<HostGraph>(std::move(recorded_));
}

void HostGraph::replay(detail::StreamImpl& stream) {
  auto* host = dynamic_cast<HostStream*>(&stream);
  if (host == nullptr) throw Error("Graph::replay: a host graph needs a host stream");
  for (const HostStream::Operation& op : operations_) host->submit(op);
}

}  // namespace mlarope::host
