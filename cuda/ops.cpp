// SPDX-License-Identifier: Apache-2.0
// The entry points of include/mlarope/backend.h: validate, build the launch, enqueue. No host
// read of device memory, no allocation, no synchronization (graph-capture safe).
#include <utility>

#include "launch/launch_builder.h"
#include "launch/stream_impl.h"
#include "mlarope/backend.h"
#include "mlarope/validate.h"

namespace mlarope {
namespace {

using detail::StreamImpl;

// Enqueue a launch descriptor whose grid may be empty (zero rows or heads: a no-op).
template <class Launch>
void enqueue(StreamImpl& stream, Launch launch) {
  if (launch.grid.blocks == 0 || launch.grid.threads == 0) return;
  stream.launch(launch);
}

void enqueue_rope(const ConstTensorView& in, const TensorView& out, const RopeArgs& args,
                  detail::RopeMode mode, Stream& stream) {
  StreamImpl& s = stream.impl();
  enqueue(s, detail::make_rope_launch(in, out, args, mode, s.profile()));
}

}  // namespace

void rope(const RopeCall& call, Stream& stream) {
  validate(call);
  if (writes_nothing(call)) return;  // zero elements: nothing launched, whatever the sizes
  stream.impl().set_footprint(detail::footprint_of(call));
  enqueue_rope(call.t, call.out, call.args, {false, false}, stream);
}

void rope_inplace(const RopeInplaceCall& call, Stream& stream) {
  validate(call);
  if (writes_nothing(call)) return;  // zero elements: nothing launched, whatever the sizes
  stream.impl().set_footprint(detail::footprint_of(call));
  enqueue_rope(call.t, call.t, call.args, {true, false}, stream);
}

void rope_backward(const RopeBackwardCall& call, Stream& stream) {
  validate(call);
  if (writes_nothing(call)) return;  // zero elements: nothing launched, whatever the sizes
  stream.impl().set_footprint(detail::footprint_of(call));
  enqueue_rope(call.grad_out, call.grad_t, call.args, {false, true}, stream);
}

void rope_backward_inplace(const RopeBackwardInplaceCall& call, Stream& stream) {
  validate(call);
  if (writes_nothing(call)) return;  // zero elements: nothing launched, whatever the sizes
  stream.impl().set_footprint(detail::footprint_of(call));
  enqueue_rope(call.grad, call.grad, call.args, {true, true}, stream);
}

void kv_split(const KvSplitCall& call, Stream& stream) {
  validate(call);
  if (writes_nothing(call)) return;  // zero elements: nothing launched, whatever the sizes
  StreamImpl& s = stream.impl();
  s.set_footprint(detail::footprint_of(call));
  enqueue(s, detail::make_kv_split_launch(call, s.profile()));
}

void kv_split_backward(const KvSplitBackwardCall& call, Stream& stream) {
  validate(call);
  if (writes_nothing(call)) return;  // zero elements: nothing launched, whatever the sizes
  StreamImpl& s = stream.impl();
  s.set_footprint(detail::footprint_of(call));
  enqueue(s, detail::make_kv_split_backward_launch(call, s.profile()));
}

void yarn_tables(const YarnTablesCall& call, Stream& stream) {
  validate(call);
  StreamImpl& s = stream.impl();
  s.set_footprint(detail::footprint_of(call));
  const detail::YarnLaunch launch = detail::make_yarn_launch(call, s.profile());
  if (launch.grid.blocks > 0) s.launch(launch);
}

}  // namespace mlarope
