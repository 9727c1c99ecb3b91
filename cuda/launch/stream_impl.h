// The interface a backend implements behind mlarope::Stream and mlarope::Graph. Launches are
// asynchronous on CUDA and immediate on the host backend; while capturing, both record them.
#pragma once

#include <memory>

#include "launch/footprint.h"
#include "launch/launches.h"
#include "mlarope/backend.h"
#include "mlarope/status.h"

namespace mlarope::detail {

/// How a backend likes its grids.
struct LaunchProfile {
  std::int64_t max_threads = 128;        ///< threads per block
  std::int64_t thread_granularity = 32;  ///< threads per block are a multiple of this
  std::int64_t max_blocks = 1 << 20;     ///< larger grids loop over rows (grid-stride)
  std::int64_t min_work_per_thread = 1;  ///< work items (16-byte pieces, pair chunks) per thread
};

/// The launch profile of a CUDA GPU: the CUDA backend launches with it, and the host
/// backend's GPU model runs every launch with exactly the geometry it gives.
inline LaunchProfile cuda_launch_profile() {
  LaunchProfile p;
  p.max_threads = 128;
  p.thread_granularity = 32;
  p.max_blocks = std::int64_t{1} << 20;
  return p;
}

class StreamImpl;

/// A captured sequence of launches and the scratch words they use (the graph owns them).
class GraphImpl {
 public:
  virtual ~GraphImpl() = default;
  /// Run the launches again on `stream` (not capturing), reading what the buffers hold now.
  /// Thread-safe; replays of one graph run one after the other, like a CUDA graph's launches.
  virtual void replay(StreamImpl& stream) = 0;
};

/// One backend stream: an ordered queue of launches that owns a scratch status word for its
/// eager THD calls; a capture gives each THD call a word of its own, which the graph owns.
class StreamImpl {
 public:
  virtual ~StreamImpl() = default;
  /// Which backend this is.
  virtual BackendKind kind() const = 0;
  /// Grid preferences of this backend.
  virtual LaunchProfile profile() const = 0;
  /// The scratch status word (device memory) of the THD call being enqueued, for its
  /// cu_seqlens check: the stream's own word, or while capturing a fresh word of the capture.
  virtual DeviceStatus* take_scratch_status() = 0;
  /// Zero a word of take_scratch_status (a launch: ordered with the others, captured too).
  virtual void clear_scratch_status(DeviceStatus* word) = 0;
  /// The tensors of the call whose launches follow (the GPU model checks accesses against
  /// them; other backends ignore it).
  virtual void set_footprint(const Footprint& footprint) { (void)footprint; }
  /// Enqueue one launch.
  virtual void launch(const CuSeqlensCheckLaunch& l) = 0;
  virtual void launch(const RopeLaunch& l) = 0;
  virtual void launch(const KvSplitLaunch& l) = 0;
  virtual void launch(const KvSplitBackwardLaunch& l) = 0;
  virtual void launch(const YarnLaunch& l) = 0;
  /// Wait until every launch enqueued so far has finished.
  virtual void synchronize() = 0;
  /// Start recording launches instead of running them.
  virtual void begin_capture() = 0;
  /// Stop recording; the recorded launches as a graph.
  virtual std::unique_ptr<GraphImpl> end_capture() = 0;
  /// True between begin_capture and end_capture.
  virtual bool capturing() const = 0;
  /// The native stream (CUDA: the cudaStream_t); nullptr where there is none (host backend).
  virtual void* native_handle() const { return nullptr; }
};

}  // namespace mlarope::detail
