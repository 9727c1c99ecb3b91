// FaultyHostStream (see faulty_host_stream.h). Compiled only into mlarope_host_faulty, with
// MLAROPE_FAULT_INJECTION: host_stream.h then declares mlarope::host::faulty::HostStream, whose
// launches run the faulty kernel instantiations of host_kernels.cpp (compiled likewise).
#include "testing/faulty_host_stream.h"

#include <utility>

#include "host/host_stream.h"
#include "launch_builder.h"
#include "mlarope/validate.h"

#if !defined(MLAROPE_FAULT_INJECTION)
#error "faulty_host_stream.cpp belongs to mlarope_host_faulty (MLAROPE_FAULT_INJECTION)"
#endif

namespace mlarope::fault_injection {

int g_kernel_fault = static_cast<int>(KernelFault::none);

namespace {

using detail::StreamImpl;

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

// As ops.cpp: THD zeroes the scratch word and runs the cu_seqlens check first.
void prepare_positions(StreamImpl& stream, kernels::PositionArgs& positions) {
  if (positions.layout != TokenLayout::thd) return;
  positions.cu_check = stream.scratch_status();
  stream.clear_scratch_status();
  detail::CuSeqlensCheckLaunch check =
      detail::make_cu_seqlens_check_launch(positions, stream.profile());
  check.args.cu_check = stream.scratch_status();
  stream.launch(check);
}

// As ops.cpp: enqueue a launch whose grid may be empty (a no-op).
template <class Launch>
void enqueue(StreamImpl& stream, KernelFault fault, Launch launch) {
  if (launch.grid.blocks == 0 || launch.grid.threads == 0) return;
  const FaultScope scope(fault);
  prepare_positions(stream, launch.args.positions);
  stream.launch(launch);
}

void enqueue_rope(StreamImpl& s, KernelFault fault, const ConstTensorView& in,
                  const TensorView& out, const RopeArgs& args, detail::RopeMode mode) {
  enqueue(s, fault, detail::make_rope_launch(in, out, args, mode, s.profile()));
}

}  // namespace

FaultyHostStream::FaultyHostStream(KernelFault fault, std::uint64_t order_seed, int threads)
    : fault_(fault),
      impl_(std::make_shared<host::HostStream>(HostStreamOptions{order_seed, threads})) {}

FaultyHostStream::~FaultyHostStream() = default;

void FaultyHostStream::rope(const RopeCall& call) {
  validate(call);
  enqueue_rope(*impl_, fault_, call.t, call.out, call.args, {false, false});
}

void FaultyHostStream::rope_inplace(const RopeInplaceCall& call) {
  validate(call);
  enqueue_rope(*impl_, fault_, call.t, call.t, call.args, {true, false});
}

void FaultyHostStream::rope_backward(const RopeBackwardCall& call) {
  validate(call);
  enqueue_rope(*impl_, fault_, call.grad_out, call.grad_t, call.args, {false, true});
}

void FaultyHostStream::rope_backward_inplace(const RopeBackwardInplaceCall& call) {
  validate(call);
  enqueue_rope(*impl_, fault_, call.grad, call.grad, call.args, {true, true});
}

void FaultyHostStream::kv_split(const KvSplitCall& call) {
  validate(call);
  enqueue(*impl_, fault_, detail::make_kv_split_launch(call, impl_->profile()));
}

void FaultyHostStream::kv_split_backward(const KvSplitBackwardCall& call) {
  validate(call);
  enqueue(*impl_, fault_, detail::make_kv_split_backward_launch(call, impl_->profile()));
}

void FaultyHostStream::begin_capture() { impl_->begin_capture(); }

std::function<void()> FaultyHostStream::end_capture() {
  std::shared_ptr<detail::GraphImpl> graph = impl_->end_capture();
  return [impl = impl_, graph, fault = fault_] {
    const FaultScope scope(fault);
    graph->replay(*impl);
    impl->synchronize();
  };
}

bool FaultyHostStream::capturing() const { return impl_->capturing(); }

}  // namespace mlarope::fault_injection
