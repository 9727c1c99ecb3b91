// SPDX-License-Identifier: Apache-2.0
// The host backend's stream and graph (see host_stream.h).
#include "host/host_stream.h"

#include "host/host_kernels.h"
#include "mlarope/error.h"

namespace mlarope::host {

namespace {

const char* variant_name(detail::RopeVariant v) {
  switch (v) {
    case detail::RopeVariant::chunked_vector: return "chunked_vector";
    case detail::RopeVariant::chunked_scalar: return "chunked_scalar";
    case detail::RopeVariant::staged_vector: return "staged_vector";
    case detail::RopeVariant::whole_slice_scalar: return "whole_slice_scalar";
  }
  return "?";
}

const char* variant_name(detail::KvVariant v) {
  return v == detail::KvVariant::vector ? "vector" : "scalar";
}

std::string kernel_name(const char* op, const char* variant, DType dtype) {
  return std::string(op) + "/" + variant + "/" + std::string(to_string(dtype));
}

}  // namespace

std::vector<std::string> kernel_paths() {
  using detail::KvVariant;
  using detail::RopeVariant;
  std::vector<std::string> paths;
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const char* op : {"rope", "rope_backward"})
      for (const RopeVariant v : {RopeVariant::chunked_vector, RopeVariant::chunked_scalar,
                                  RopeVariant::staged_vector, RopeVariant::whole_slice_scalar})
        paths.push_back(kernel_name(op, variant_name(v), dtype));
    for (const char* op : {"kv_split", "kv_split_backward"})
      for (const KvVariant v : {KvVariant::vector, KvVariant::scalar})
        paths.push_back(kernel_name(op, variant_name(v), dtype));
  }
  paths.emplace_back("yarn_tables");
  return paths;
}

HostStream::HostStream(const HostStreamOptions& options, const KernelTable& kernels)
    : executor_(options.seed, options.threads), kernels_(&kernels), gpu_model_(options.gpu_model),
      model_block_stride_(options.model_block_stride),
      model_stats_(std::make_shared<std::vector<kernels::gpu_model::LaunchStats>>()) {}

void HostStream::set_footprint(const detail::Footprint& footprint) { footprint_ = footprint; }

void throw_model_findings(const kernels::gpu_model::Recorder& recorder) {
  if (recorder.findings().empty()) return;
  std::string message = "GPU model: " + std::to_string(recorder.stats().errors) + " error(s)";
  for (const std::string& f : recorder.findings()) message += "\n  " + f;
  throw Error(message);
}

void check_launch_configuration(const std::string& kernel, const kernels::GridShape& grid) {
  if (grid.blocks >= 1 && grid.blocks <= 0x7fffffff && grid.threads >= 1 && grid.threads <= 1024)
    return;
  throw Error("GPU model: " + kernel + " launched with grid " + std::to_string(grid.blocks) +
              " x " + std::to_string(grid.threads) +
              ": not a launch configuration a GPU accepts (1 to 2^31 - 1 "
              "blocks of 1 to 1024 threads; CUDA fails it with cudaErrorInvalidConfiguration)");
}

detail::LaunchProfile HostStream::profile() const {
  if (gpu_model_) return detail::cuda_launch_profile();
  // Few threads per block: each host "thread" is a function call, so fewer, larger work
  // items amortise the row bookkeeping (freq_row, table loads) best; at least 256 work items
  // (about 4 KB of a row) each, so that rows of few heads are not cut into tiny calls.
  detail::LaunchProfile p;
  p.max_threads = 8;
  p.thread_granularity = 1;
  p.min_work_per_thread = 256;
  p.max_blocks = std::int64_t{1} << 20;
  return p;
}

void HostStream::submit(Operation op) {
  if (capturing_) recorded_.push_back(std::move(op));
  else op(executor_);
}

void HostStream::launch(const detail::RopeLaunch& l) {
  const char* op = l.args.rotation.adjoint ? "rope_backward" : "rope";
  submit_launch(kernel_name(op, variant_name(l.variant), l.dtype), kernels_->rope, l);
}
void HostStream::launch(const detail::KvSplitLaunch& l) {
  submit_launch(kernel_name("kv_split", variant_name(l.variant), l.dtype), kernels_->kv_split, l);
}
void HostStream::launch(const detail::KvSplitBackwardLaunch& l) {
  submit_launch(kernel_name("kv_split_backward", variant_name(l.variant), l.dtype),
                kernels_->kv_split_backward, l);
}
void HostStream::launch(const detail::YarnLaunch& l) {
  submit_launch("yarn_tables", kernels_->yarn, l);
}

void HostStream::begin_capture() {
  if (capturing_) throw Error("begin_capture: the stream is already capturing");
  capturing_ = true;
  recorded_.clear();
}

std::unique_ptr<detail::GraphImpl> HostStream::end_capture() {
  if (!capturing_) throw Error("end_capture: the stream is not capturing");
  capturing_ = false;
  return std::make_unique<HostGraph>(std::exchange(recorded_, {}));
}

void HostGraph::replay(detail::StreamImpl& stream) {
  auto* host = dynamic_cast<HostStream*>(&stream);
  if (host == nullptr) throw Error("Graph::replay: a host graph needs a host stream");
  const std::lock_guard<std::mutex> one_at_a_time(replaying_);
  for (const HostStream::Operation& op : operations_) host->submit(op);
}

}  // namespace mlarope::host
