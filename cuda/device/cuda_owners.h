// SPDX-License-Identifier: Apache-2.0
// Owners of CUDA resources (streams, graphs, events, device memory) whose destructors neither
// throw nor make calls that are illegal while this thread captures, and the error check.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <type_traits>

#include "mlarope/error.h"

namespace mlarope::detail::cuda {

/// Throws mlarope::Error naming `what` unless `e` is cudaSuccess; the error is taken off the
/// thread's last-error slot, so that the next launch's check does not report it again.
inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw Error(std::string("mlarope CUDA: ") + what + ": " + cudaGetErrorString(e));
}

/// While alive, this thread's capture mode is relaxed.
// NOTE: allocating, freeing and synchronizing are illegal on a thread that captures in the
// thread-local mode of our captures; the calls made under this guard enqueue nothing on the
// capturing stream.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&previous_); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&previous_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
};

/// Calls `destroy` on a handle, ignoring its status (a destructor cannot act on it).
template <class Handle, cudaError_t (*destroy)(Handle)>
struct Destroy {
  void operator()(Handle h) const noexcept {
    RelaxedCaptureMode relaxed;
    destroy(h);
  }
};

template <class Handle, cudaError_t (*destroy)(Handle)>
using Owned = std::unique_ptr<std::remove_pointer_t<Handle>, Destroy<Handle, destroy>>;

using StreamOwner = Owned<cudaStream_t, cudaStreamDestroy>;
using GraphOwner = Owned<cudaGraph_t, cudaGraphDestroy>;
using GraphExecOwner = Owned<cudaGraphExec_t, cudaGraphExecDestroy>;
using EventOwner = Owned<cudaEvent_t, cudaEventDestroy>;
using DeviceMemoryOwner = Owned<void*, cudaFree>;

}  // namespace mlarope::detail::cuda
