// SPDX-License-Identifier: Apache-2.0
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
  /// Work items per thread, at least, of the bodies that load in batches (chunked rope,
  /// kv_split, kv_split_backward: kernels/segment_copy.h, kRotateBatch, kSumBatch).
  std::int64_t batched_work_per_thread = 1;
  /// Every block of a THD grid checks the call's whole cu_seqlens (kernels/freq_row.h), so its
  /// blocks are capped: above kernels::kSharedSequences sequences (whose rows' plans search
  /// cu_seqlens; up to it, a block a row) at most max_thd_blocks (4096: more than an H200 holds
  /// at once, 132 SMs x 16 blocks of 128 threads), and, where the sequences outnumber the
  /// call's work, at most as many as keep the check's reads (blocks x sequences) within the
  /// call's work items (rows x work), though never under min_thd_blocks (a wave of an H200: 132
  /// SMs x 16). The timing model weighed it on 70,000 sequences of 2 rows (rope, one head,
  /// emb_dim 4, f32): 4096 blocks 1.14 ms, 2112 0.91 ms, 1056 1.6 ms, 264 5.8 ms (a block's
  /// rows run one after another); the GPU model's time falls with the blocks.
  std::int64_t max_thd_blocks = 4096;
  std::int64_t min_thd_blocks = 2112;
};

/// The launch profile of a CUDA GPU: the CUDA backend launches with it, and the host
/// backend's GPU model runs every launch with exactly the geometry it gives.
inline LaunchProfile cuda_launch_profile() {
  LaunchProfile p;
  p.max_threads = 128;
  p.thread_granularity = 32;
  p.max_blocks = std::int64_t{1} << 20;
  // A row of few heads (H = 16: 6 KB in bf16) spread over 128 threads leaves each thread one or
  // two 16-byte loads, too few to fill its batches, and a block's round trips cost the same
  // however few bytes they carry. Fewer threads a block, each with more loads, is more blocks
  // an SM and more bytes in flight (the timing model, docs/kernels.md: H = 16 rope 1.14-3.31x
  // a copy of the same bytes -> 0.92-1.19x); a row of 128 heads keeps 128 threads.
  p.batched_work_per_thread = 16;
  return p;
}

class StreamImpl;

/// A captured sequence of launches.
class GraphImpl {
 public:
  virtual ~GraphImpl() = default;
  /// Run the launches again on `stream` (not capturing), reading what the buffers hold now.
  /// Thread-safe; replays of one graph run one after the other, like a CUDA graph's launches.
  virtual void replay(StreamImpl& stream) = 0;
};

/// One backend stream: an ordered queue of launches (one per call: a THD call checks its
/// cu_seqlens inside its kernel, kernels/row_rounds.h).
class StreamImpl {
 public:
  virtual ~StreamImpl() = default;
  /// Which backend this is.
  virtual BackendKind kind() const = 0;
  /// Grid preferences of this backend.
  virtual LaunchProfile profile() const = 0;
  /// The tensors of the call whose launches follow (the GPU model checks accesses against
  /// them; other backends ignore it).
  virtual void set_footprint(const Footprint& footprint) = 0;
  /// Enqueue one launch.
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
  virtual void* native_handle() const = 0;
};

}  // namespace mlarope::detail
