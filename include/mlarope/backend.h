// SPDX-License-Identifier: Apache-2.0
// The optimized backends behind the operations of ops.h: streams, graphs, device buffers and
// the entry points. Two backends share one kernel source (docs/architecture.md): `cuda` runs it on
// a GPU, `host` runs it on the CPU through a grid executor that shuffles block and thread order.
//
// Every entry point validates the call (mlarope::validate, throws mlarope::Error, nothing is
// launched on error), picks a kernel variant and enqueues it on the stream. It never reads
// device memory on the host, never allocates and never synchronizes, so it can be captured
// into a Graph. Device metadata errors are reported through the call's status word.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mlarope/ops.h"

namespace mlarope {

/// Where kernels run.
enum class BackendKind : std::uint8_t {
  host,  ///< on the CPU, through the host grid executor; "device memory" is host memory
  cuda   ///< on a CUDA GPU
};

/// "host" or "cuda".
std::string_view to_string(BackendKind kind);

/// True when this build has the CUDA backend and a CUDA device is present.
bool cuda_device_available();

/// Options of a host stream.
struct HostStreamOptions {
  std::uint64_t seed = 0;  ///< draws the order of blocks and of threads within a block
  int threads = 0;         ///< worker threads over blocks; 0: all hardware threads
  /// Run as a model of the GPU: the CUDA launch geometry and the kernels' device code paths,
  /// one worker, every global access checked (alignment, bounds against the call's tensors,
  /// races between threads) and counted (32-byte sectors per warp). A launch that breaks a
  /// rule throws mlarope::Error naming the kernel, block, thread, address and size.
  bool gpu_model = false;
  /// Under the GPU model, run only every n-th block of each launch (1: every block): the
  /// figures of a sample, for predicting the time of full-size calls cheaply (the checks then
  /// see only the sampled blocks).
  std::int64_t model_block_stride = 1;
};

/// What the GPU model of a host stream measured of one launch (HostStreamOptions::gpu_model).
struct ModelLaunchStats {
  std::string kernel;  ///< op/variant/dtype, e.g. "rope/chunked_vector/bf16"
  std::int64_t blocks = 0;
  int threads = 0;                     ///< per block
  std::int64_t accesses = 0;           ///< loads and stores (atomics not counted)
  std::int64_t requested_bytes = 0;    ///< bytes the accesses asked for
  std::int64_t useful_bytes = 0;       ///< sum over warp accesses of the distinct bytes asked for
  std::int64_t warp_sector_bytes = 0;  ///< sum over warp accesses of distinct 32-byte sectors x 32
  std::int64_t dram_bytes = 0;         ///< (distinct sectors read + distinct sectors written) x 32
  std::int64_t errors = 0;             ///< alignment, bounds and race findings
  // What the timing model needs (host/timing_model.h). A thread's loads since its last store
  // form a batch that can be in flight together; a load of an index array (cu_seqlens,
  // position ids, offsets) is a batch of its own, since its value decides the addresses that
  // follow. A block waits, phase by phase, for the thread with the most batches.
  std::int64_t blocks_observed = 0;    ///< blocks the model ran (all, or a sample)
  std::int64_t blocks_run = 0;         ///< of those, the blocks that made a global access
  std::int64_t round_trips = 0;        ///< over blocks, the critical path's batches of data loads
  std::int64_t index_round_trips = 0;  ///< over blocks, the critical path's index loads
  std::int64_t index_loads = 0;   ///< loads of index arrays, over every thread (a THD gate's cost)
  std::int64_t model_bytes = 0;   ///< the GPU model's own state for the launch, at its largest
  std::int64_t load_phases = 0;   ///< over blocks, the phases in which a thread loaded data
  std::int64_t load_batches = 0;  ///< batches of data loads, over every thread
  std::int64_t loaded_bytes = 0;  ///< bytes of data loads (index loads not counted)
  /// The most bytes one thread's batch loaded: what the compiled code must keep in flight
  /// for the model's round trips to hold (ci/sass_batches.py checks it in the SASS).
  std::int64_t largest_batch_bytes = 0;
  std::int64_t stored_bytes = 0;
  /// Distinct 1 KiB chunks of memory the launch's sectors lie in, and the bytes of those
  /// distinct sectors (read or written): touched_bytes / (chunks x 1 KiB) is how densely the
  /// launch uses the DRAM pages it opens (1: streaming; in-place rope of a 64-of-192 slice: 1/3).
  std::int64_t dram_chunks = 0;
  std::int64_t touched_bytes = 0;

  /// Distinct bytes asked for / bytes of the sectors fetched, over the warp accesses (1:
  /// perfectly coalesced; threads of a warp reading the same bytes count them once).
  double sector_efficiency() const {
    return warp_sector_bytes > 0
               ? static_cast<double>(useful_bytes) / static_cast<double>(warp_sector_bytes)
               : 1.0;
  }
};

namespace detail {
class StreamImpl;
class GraphImpl;
}  // namespace detail

class Graph;

/// An ordered queue of launches on one backend. Host streams run each launch before the call
/// returns; CUDA streams are asynchronous. Every call is one launch (a THD call checks its
/// cu_seqlens inside its kernel), and a stream holds no device memory of its own. Destroying a
/// stream mid-capture ends the capture and drops it.
class Stream {
 public:
  /// A host-backend stream.
  static Stream host(const HostStreamOptions& options = {});
  /// A CUDA stream on the current device; throws mlarope::Error when none is available or
  /// the stream cannot be had (nothing leaks).
  static Stream cuda();
  /// A stream of `kind` with default options.
  static Stream create(BackendKind kind);
  /// A stream over a backend implementation (library internal: tests wrap other kernel
  /// builds this way).
  static Stream from_impl(std::unique_ptr<detail::StreamImpl> impl);

  Stream(Stream&&) noexcept;
  Stream& operator=(Stream&&) noexcept;
  ~Stream();

  /// The backend of this stream.
  BackendKind kind() const;
  /// Wait until everything enqueued so far has finished.
  void synchronize();
  /// Record the following launches instead of running them (CUDA: stream capture).
  void begin_capture();
  /// Stop recording; the recorded launches as a replayable graph.
  Graph end_capture();
  /// True between begin_capture and end_capture.
  bool capturing() const;
  /// The backend's native stream, for interop such as timing with CUDA events: the
  /// cudaStream_t of a CUDA stream, nullptr for a host stream. The Stream keeps ownership.
  void* native_handle() const;

  /// The backend implementation (library internal).
  detail::StreamImpl& impl() { return *impl_; }
  const detail::StreamImpl& impl() const { return *impl_; }

 private:
  explicit Stream(std::unique_ptr<detail::StreamImpl> impl);
  std::unique_ptr<detail::StreamImpl> impl_;
};

/// Captured launches. A replay reads what the buffers hold at replay time (new cu_seqlens,
/// position ids, inputs), exactly like a CUDA graph. A graph refers to no memory of the stream
/// that captured it: it may outlive that stream and replay on any stream of its backend,
/// concurrently with other work there; replays of one graph run one after the other (as
/// CUDA runs the launches of one graph), whichever streams and threads they come from.
class Graph {
 public:
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  ~Graph();

  /// Enqueue the captured launches on `stream` (same backend as the capture, not capturing:
  /// throws mlarope::Error otherwise). Thread-safe.
  void replay(Stream& stream);

 private:
  friend class Stream;
  Graph(std::unique_ptr<detail::GraphImpl> impl, BackendKind kind);
  std::unique_ptr<detail::GraphImpl> impl_;
  BackendKind kind_;
};

/// Memory that a backend's kernels can access: device memory on CUDA, host memory on the host
/// backend, both kDeviceBufferAlignment aligned. Copies and fills are synchronous (complete when
/// they return) and not ordered with any stream: synchronize the stream before copying results
/// back, and do not copy while a stream is capturing.
class DeviceBuffer {
 public:
  /// An empty buffer.
  DeviceBuffer() = default;
  /// `bytes` bytes of uninitialised memory of backend `kind`.
  DeviceBuffer(BackendKind kind, std::size_t bytes);
  DeviceBuffer(DeviceBuffer&&) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&&) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  /// Start of the memory.
  void* data() { return data_; }
  const void* data() const { return data_; }
  /// Start of the memory as T*.
  template <class T>
  T* as() {
    return static_cast<T*>(data_);
  }
  /// Size in bytes.
  std::size_t bytes() const { return bytes_; }
  /// Backend of the memory.
  BackendKind kind() const { return kind_; }

  /// Copy `bytes` bytes from host memory `src` to offset `offset` of the buffer.
  void copy_from_host(const void* src, std::size_t bytes, std::size_t offset = 0);
  /// Copy `bytes` bytes at offset `offset` of the buffer to host memory `dst`.
  void copy_to_host(void* dst, std::size_t bytes, std::size_t offset = 0) const;
  /// Set every byte of the buffer to `value` (guards, poison).
  void fill_bytes(unsigned char value);

 private:
  void release() noexcept;

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  BackendKind kind_ = BackendKind::host;
};

/// The alignment of a DeviceBuffer's memory on both backends (cudaMalloc's).
inline constexpr std::size_t kDeviceBufferAlignment = 256;

/// Where a DeviceBuffer holds a copy of `bytes` bytes of host memory at `host`: a buffer of
/// `buffer_bytes`, the copy at `offset` in it.
struct CopyPlacement {
  std::size_t offset = 0;
  std::size_t buffer_bytes = 0;
};

/// The placement of a device copy of host memory that keeps the host address modulo
/// kDeviceBufferAlignment, so that a misaligned or odd-offset host view reaches the kernels
/// as such (test mirrors of host tensors use it).
CopyPlacement place_copy(const void* host, std::size_t bytes);

/// The launches that the GPU model measured on `stream` since the last take (empty unless
/// `stream` is a host stream with HostStreamOptions::gpu_model).
std::vector<ModelLaunchStats> take_model_stats(Stream& stream);

/// Every kernel name take_model_stats can report: op/variant/dtype for each op with variants,
/// each of its variants and each activation dtype, and yarn_tables (the paths a fuzz campaign
/// should all reach).
std::vector<std::string> model_kernel_paths();

/// rope out of place on `stream` (docs/semantics.md §4).
void rope(const RopeCall& call, Stream& stream);
/// rope in place: writes only the rope slices.
void rope_inplace(const RopeInplaceCall& call, Stream& stream);
/// The adjoint of rope, out of place.
void rope_backward(const RopeBackwardCall& call, Stream& stream);
/// The adjoint of rope, in place.
void rope_backward_inplace(const RopeBackwardInplaceCall& call, Stream& stream);
/// key = [kv[..., :k_dim], rope(k_pe)], value = kv[..., k_dim:].
void kv_split(const KvSplitCall& call, Stream& stream);
/// grad_kv = [grad_key[..., :k_dim], grad_value], grad_k_pe = adjoint of the head sum.
void kv_split_backward(const KvSplitBackwardCall& call, Stream& stream);
/// YaRN cos/sin tables (Megatron's YarnRotaryEmbedding), computed in double, rounded once.
void yarn_tables(const YarnTablesCall& call, Stream& stream);

}  // namespace mlarope
