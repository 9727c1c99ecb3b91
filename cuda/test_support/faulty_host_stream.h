// SPDX-License-Identifier: Apache-2.0
// The host backend with one deliberately wrong kernel behaviour (test builds only: the library
// mlarope_host_faulty, built from the copies of the kernel sources that make_faulty_sources
// edits after kernel_faults.txt). Calls take the public entry points (validate, launch
// builder, dispatcher, cu_seqlens check, grid executor, graph capture) on a host stream whose
// kernel table is the faulty build; with KernelFault::none it computes what the production
// host backend computes.
//
// Symbols: the faulty kernel bodies live in the inline namespace mlarope::kernels::faulty and
// their host table is mlarope::host::faulty_kernel_table(), so this library links into a
// binary that also has mlarope_host (the harness does) without an ODR clash.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "host/gpu_model.h"
#include "mlarope/backend.h"
#include "mlarope/ops.h"
#include "test_support/kernel_faults.h"

namespace mlarope::fault_injection {

/// A synchronous host stream whose kernels apply `fault`. Not thread safe: the fault selector
/// is one global, set for the duration of each call (and each replay).
class FaultyHostStream {
 public:
  /// A stream applying `fault`, drawing block and thread orders from `order_seed`, on
  /// `threads` workers (0: all hardware threads); under the GPU model with `gpu_model`.
  explicit FaultyHostStream(KernelFault fault, std::uint64_t order_seed = 0, int threads = 0,
                            bool gpu_model = false);
  ~FaultyHostStream();
  FaultyHostStream(const FaultyHostStream&) = delete;
  FaultyHostStream& operator=(const FaultyHostStream&) = delete;

  /// The fault of this stream.
  KernelFault fault() const { return fault_; }

  /// The primitives (validated like the public entry points; throw mlarope::Error). They run
  /// before returning, except while capturing.
  void rope(const RopeCall& call);
  void rope_inplace(const RopeInplaceCall& call);
  void rope_backward(const RopeBackwardCall& call);
  void rope_backward_inplace(const RopeBackwardInplaceCall& call);
  void kv_split(const KvSplitCall& call);
  void kv_split_backward(const KvSplitBackwardCall& call);

  /// Record the following calls instead of running them.
  void begin_capture();
  /// Stop recording; a function that replays the recorded calls (with this stream's fault),
  /// reading what the buffers hold at replay.
  std::function<void()> end_capture();
  /// True between begin_capture and end_capture.
  bool capturing() const;
  /// What the GPU model measured of each launch so far (empty without gpu_model).
  std::vector<kernels::gpu_model::LaunchStats> model_stats() const;

 private:
  KernelFault fault_;
  std::shared_ptr<Stream> stream_;
};

}  // namespace mlarope::fault_injection
