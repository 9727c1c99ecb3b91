// SPDX-License-Identifier: Apache-2.0
// The GPU model of the host backend (docs/architecture.md rule 5): while a launch runs under a
// Recorder, every global access of the kernel bodies (kernels/portability.h) is shown to it first.
// It checks what a GPU would punish and counts what a GPU would fetch:
//   - alignment: an access whose address is not a multiple of its size (a GPU's misaligned
//     address fault);
//   - bounds: an access outside the elements of every tensor of the call's footprint, gaps
//     between the rows of a view included (compute-sanitizer memcheck); the access is not
//     made. A store to an input, or a plain access to a status word, is an error too;
//   - races: two threads of the launch writing one byte, or one writing a byte another reads
//     (atomics excepted), unless a block barrier orders them (the same block, an earlier
//     phase of a phased body); shared memory likewise, within its block;
//   - coalescing: per warp (32 consecutive threads of a block) and per access in program
//     order, the distinct 32-byte sectors against the bytes requested (over a sample of the
//     blocks: one run of kSampleRun in kCoalescingStride, every access still checked); per launch,
//     the distinct sectors read plus the distinct sectors written (the predicted DRAM traffic: each
//     sector fetched once, each written sector written back once);
//   - asynchronous copies (cp.async): the shared bytes land at the thread's wait, which must
//     come before the phase's barrier and before the thread touches them;
//   - round trips, for the timing model: per thread and phase, the batches of loads that can
//     be in flight together (ModelLaunchStats: a batch ends at a store, global or shared, at
//     MLAROPE_END_LOAD_BATCH or at a wait for asynchronous copies), and per block the
//     critical path.
// The executor runs a recorded launch on one thread, calling begin_thread before each thread
// and, for a phased body, begin_phase before each phase of a block; a block's threads all run
// before the next block's, so the per-warp records are folded and freed block by block.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "host/host_executor.h"
#include "kernels/portability.h"
#include "launch/footprint.h"
#include "mlarope/backend.h"

namespace mlarope::kernels::gpu_model {

/// What the model measured of one launch.
using LaunchStats = ModelLaunchStats;

/// The model of one launch.
class Recorder final : public host::ThreadObserver {
 public:
  /// A launch of `kernel` that may touch the tensors of `footprint`. With `block_stride` > 1
  /// only one run of kSampleRun blocks in block_stride runs (a sample, for the timing model at
  /// full size: the findings and figures are those of the sampled blocks).
  Recorder(std::string kernel, const detail::Footprint& footprint, std::int64_t block_stride = 1);

  void begin_thread(const GridCoord& coord) override;
  void begin_phase(std::int64_t block, int phase, const void* shared, std::size_t bytes) override;
  bool runs_block(std::int64_t block) const override {
    return block / kSampleRun % block_stride_ == 0;  // runs of consecutive blocks, as memory lies
  }
  /// Consecutive blocks a sample keeps together (neighbouring rows share table lines and DRAM
  /// pages, so a sample of lone blocks would see sparser memory than the launch).
  static constexpr std::int64_t kSampleRun = 8;
  /// Where every block runs, the coalescing figures come from one run of kSampleRun blocks in
  /// this many: grouping a warp's accesses costs as much as checking them, and the figure of
  /// a sample of runs is the launch's within a few parts in a thousand.
  static constexpr std::int64_t kCoalescingStride = 4;
  /// Check and count one access; false when it must not be made (out of bounds).
  bool observe(const void* address, int bytes, Access access);
  /// The running thread's loads so far are waited for before any that follow (a body's
  /// MLAROPE_END_LOAD_BATCH): its next load opens a new batch.
  void end_load_batch() { batch_open_ = false; }
  /// The running thread's index loads until end_index_batch were all issued before the first
  /// of them returned (a body's MLAROPE_BEGIN_INDEX_BATCH): one index round trip, not one each.
  void begin_index_batch() { index_batch_ = IndexBatch::open; }
  void end_index_batch() { index_batch_ = IndexBatch::none; }

  /// A cp.async of the running thread (async_copy_to_shared): the global read is a load of
  /// its open batch; the shared bytes are written at the thread's wait_async_copies, and an
  /// access of the thread to them before it, a second copy to them before it, or a phase that
  /// ends without it, is a finding.
  void async_copy(void* to, const void* from, int bytes);
  /// The running thread's asynchronous copies land; its batch of loads ends (the wait).
  void wait_async_copies();

  /// The findings (the first few, each naming kernel, block, thread, address and size).
  const std::vector<std::string>& findings() const { return findings_; }
  /// Fold the last block's records in; run_recorded calls it when the launch has run.
  void finish();
  /// The measurements; valid once finish() ran.
  LaunchStats stats() const;

 private:
  struct Interval {  // disjoint byte range of the footprint
    std::uintptr_t begin, end;
    int region;  ///< index in the footprint of the first tensor covering it
    bool readable, writable, atomic;
    bool index;  ///< an index array's bytes
  };
  struct RoundTrips {  // batches of loads waited for: of data, and of index arrays
    std::int64_t data = 0, index = 0;
    std::int64_t phases = 0;  ///< phases with data loads (a phase's maximum: 0 or 1)
    void at_least(const RoundTrips& o) {
      data = o.data > data ? o.data : data;
      index = o.index > index ? o.index : index;
      phases = o.data > 0 || phases > 0 ? 1 : 0;
    }
    void add(const RoundTrips& o) { data += o.data, index += o.index, phases += o.phases; }
  };
  /// Per 2-byte granule of a writable tensor (no dtype is narrower): the last writer and
  /// reader, each as the epoch of its (block, phase) and its thread in the block. Epoch 0 is
  /// none; reader_thread kSeveral marks readers of several threads of the block of
  /// reader_epoch (the latest), kSeveralBlocks of several blocks. 12 bytes: the model's
  /// memory is 6 bytes per written byte of the footprint, whatever the accesses.
  struct Shadow {
    std::uint32_t writer_epoch = 0, reader_epoch = 0;
    std::uint16_t writer_thread = 0, reader_thread = 0;
  };
  static constexpr std::uint16_t kSeveral = 0xFFFF, kSeveralBlocks = 0xFFFE;
  static constexpr int kGranuleBits = 1;
  static constexpr int kPageBits = 12;  ///< pages of 4 KiB of the address space
  static constexpr std::uintptr_t kPageMask = (std::uintptr_t{1} << kPageBits) - 1;
  static constexpr std::size_t kGranulesPerPage = std::size_t{1} << (kPageBits - kGranuleBits);
  /// What the model keeps of a 4 KiB page of the footprint, made at its first access: the
  /// 32-byte sectors read and written (128 each), the 1 KiB chunks they lie in, and the
  /// granules' shadows once a writable byte of the page is accessed.
  struct Page {
    std::uint64_t read[2] = {}, written[2] = {};
    std::uint8_t chunks = 0;
    std::unique_ptr<Shadow[]> shadow;
  };
  struct WarpRecord {  // one access of a thread of the phase: the thread's `sequence`-th
    std::int32_t warp;
    std::int64_t sequence;
    std::uintptr_t begin, end;
  };

  struct UnwrittenLoad {  // a load of shared bytes no thread of the block had written
    std::uintptr_t address;
    int bytes;
    int thread;
  };

  struct AsyncCopy {  // a copy of the running thread not yet waited for
    std::uintptr_t to;
    int bytes;
    unsigned char data[16];  ///< the source's bytes when the copy was issued
  };

  void build_intervals();
  const Interval* find(std::uintptr_t address, int bytes) const;
  void report(const std::string& what, const void* address, int bytes);
  /// The page of global byte `address`, made on first use.
  Page& page_of(std::uintptr_t address);
  /// The shadows of the granules of a page, allocated on first use (zero: no access yet).
  Shadow* shadows_of(Page& page);
  /// check_race's shadow_of for the current block's shared memory.
  auto shared_shadow() {
    return [this](std::uintptr_t granule) -> Shadow& {
      return shared_shadow_[granule - (shared_begin_ >> kGranuleBits)];
    };
  }
  /// True when an asynchronous copy of the running thread not yet waited for writes one of the
  /// bytes [address, address + bytes).
  bool lands_in(std::uintptr_t address, int bytes) const;
  /// True when every byte of [address, address + bytes) of the block's shared memory has been
  /// written by a thread of the current block (a store, or a copy issued).
  bool written_in_block(std::uintptr_t address, int bytes);
  /// The phase's loads of shared bytes that were not written when they ran and still are not:
  /// findings (a GPU's shared memory starts each block undefined).
  void report_unwritten_loads();
  template <class ShadowOf>
  void check_race(ShadowOf shadow_of, std::uintptr_t address, int bytes, Access access);
  bool ordered_before(std::uint32_t epoch, std::uint16_t thread) const;
  bool observe_shared(std::uintptr_t address, int bytes, Access access);
  void count(std::uintptr_t address, int bytes, Access access, bool index, Page& first_page);
  void fold_warp_accesses();
  void end_thread();
  void end_phase();
  void start_block(std::int64_t block);
  void end_block();

  std::string kernel_;
  detail::Footprint footprint_;
  std::vector<Interval> intervals_;
  /// The footprint's pages by number (address >> kPageBits), made when first accessed: the
  /// model's memory grows with the bytes the launch touches, not with its accesses.
  std::unordered_map<std::uintptr_t, Page> pages_;
  struct PageSlot {  // a page recently looked up
    std::uintptr_t number = 0;
    Page* page = nullptr;
  };
  static constexpr std::size_t kPageCache = 64;
  PageSlot page_cache_[kPageCache];
  const Interval* last_interval_ = nullptr;  ///< the interval of the last access
  std::int64_t block_stride_ = 1;
  bool coalescing_block_ = true;  ///< the current block's accesses count in the coalescing figures
  GridCoord coord_;
  std::uint32_t epoch_ = 0;        ///< of the current (block, phase): 1, 2, ... in running order
  std::uint32_t block_epoch_ = 0;  ///< the epoch of the current block's first phase
  std::int32_t phase_ = 0;         ///< of a phased body; 0 otherwise
  std::uintptr_t shared_begin_ = 0, shared_end_ = 0;   ///< the current block's shared memory
  std::vector<Shadow> shared_shadow_;                  ///< by granule
  std::vector<UnwrittenLoad> unwritten_loads_;         ///< of the current phase
  std::int64_t sequence_ = 0;                          ///< accesses of the current thread so far
  std::vector<WarpRecord> warp_records_;               ///< the current phase's accesses
  std::vector<std::size_t> group_start_, group_fill_;  ///< fold_warp_accesses' counting sort
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> grouped_;
  std::int64_t sectors_read_ = 0, sectors_written_ = 0, chunks_ = 0, index_loads_ = 0,
               shadow_pages_ = 0;
  std::size_t peak_records_ = 0;  ///< the most access records of one phase
  std::int64_t accesses_ = 0, requested_ = 0, errors_ = 0;
  std::int64_t useful_bytes_ = 0, warp_sector_bytes_ = 0;  ///< of the blocks folded so far
  // Round trips: the current thread's in this phase, the most of any thread of this phase,
  // the current block's over its finished phases, and the finished blocks' total.
  bool batch_open_ = false;
  /// none: each index load is a round trip of its own; open: the next one is the batch's
  /// round trip; counted: the batch's round trip is counted.
  enum class IndexBatch : std::uint8_t { none, open, counted } index_batch_ = IndexBatch::none;
  std::int64_t batch_bytes_ = 0;  ///< of the open batch
  RoundTrips thread_trips_, phase_trips_, block_trips_, launch_trips_;
  std::vector<AsyncCopy> async_copies_;  ///< the running thread's, until its wait
  std::int64_t block_ = -1;              ///< the block running (-1: none yet)
  bool block_accessed_ = false;
  std::int64_t blocks_observed_ = 0, blocks_run_ = 0, load_batches_ = 0, loaded_bytes_ = 0,
               largest_batch_bytes_ = 0, stored_bytes_ = 0;
  std::vector<std::string> findings_;
};

/// Runs `run` (which launches on `executor`) under `recorder`: sets the thread's model
/// pointer, so that the bodies take their device paths and show every access.
template <class Run>
void run_recorded(Recorder& recorder, const host::HostExecutor& executor, Run run) {
  struct Scope {
    explicit Scope(Recorder* r) : saved(t_recorder) { t_recorder = r; }
    ~Scope() { t_recorder = saved; }
    Recorder* saved;
  } scope(&recorder);
  const host::HostExecutor recorded = executor.observed_by(&recorder);
  run(recorded);
  recorder.finish();
}

}  // namespace mlarope::kernels::gpu_model
