// The GPU model of the host backend (DESIGN.md rule 5): while a launch runs under a Recorder,
// every global access of the kernel bodies (kernels/portability.h) is shown to it first. It
// checks what a GPU would punish and counts what a GPU would fetch:
//   - alignment: an access whose address is not a multiple of its size (a GPU's misaligned
//     address fault);
//   - bounds: an access outside the elements of every tensor of the call's footprint, gaps
//     between the rows of a view included (compute-sanitizer memcheck); the access is not
//     made. A store to an input, or a plain access to a status word, is an error too;
//   - races: two threads of the launch writing one byte, or one writing a byte another reads
//     (atomics excepted), unless a block barrier orders them (the same block, an earlier
//     phase of a phased body); shared memory likewise, within its block;
//   - coalescing: per warp (32 consecutive threads of a block) and per access in program
//     order, the distinct 32-byte sectors against the bytes requested; per launch, the
//     distinct sectors read plus the distinct sectors written (the predicted DRAM traffic:
//     each sector fetched once, each written sector written back once);
//   - round trips, for the timing model: per thread and phase, the batches of loads that can
//     be in flight together (ModelLaunchStats), and per block the critical path.
// The executor runs a recorded launch on one thread, calling begin_thread before each thread
// and, for a phased body, begin_phase before each phase of a block; a block's threads all run
// before the next block's, so the per-warp records are folded and freed block by block.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
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
  /// Check and count one access; false when it must not be made (out of bounds).
  bool observe(const void* address, int bytes, Access access);

  /// The findings (the first few, each naming kernel, block, thread, address and size).
  const std::vector<std::string>& findings() const { return findings_; }
  /// Fold the last block's records in; run_recorded calls it when the launch has run.
  void finish();
  /// The measurements; valid once finish() ran.
  LaunchStats stats() const;

 private:
  struct Interval {  // disjoint byte range of the footprint
    std::uintptr_t begin, end;
    int region;         ///< index in the footprint of the first tensor covering it
    bool readable, writable, atomic;
    bool index;         ///< an index array's bytes
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
  struct Shadow {  // per byte: the last writer and reader (-1: none; reader -2: several)
    std::int32_t writer = -1, writer_phase = 0;
    std::int32_t reader = -1, reader_phase = 0;
    std::int32_t reader_block = -1;  ///< the readers' block (-2: several blocks)
  };
  struct WarpAccess {  // the byte ranges [first, second) the threads of a warp asked for
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;
  };
  struct WarpKey {  // the sequence-th access of the threads of one warp in one phase
    std::int64_t block;
    int warp;
    int phase;
    std::int64_t sequence;
    bool operator==(const WarpKey& o) const {
      return block == o.block && warp == o.warp && phase == o.phase && sequence == o.sequence;
    }
  };
  struct WarpKeyHash {
    std::size_t operator()(const WarpKey& k) const {
      return std::hash<std::int64_t>()(((k.block * 64 + k.warp) * 1009 + k.phase) * 1000003 + k.sequence);
    }
  };

  void build_intervals();
  const Interval* find(std::uintptr_t address, int bytes) const;
  void report(const std::string& what, const void* address, int bytes);
  /// The shadow of global byte `address`, its page allocated on first use.
  Shadow& global_shadow(std::uintptr_t address);
  template <class ShadowOf>
  void check_race(ShadowOf shadow_of, std::uintptr_t address, int bytes, Access access);
  bool ordered_before(std::int32_t thread, std::int32_t phase) const;
  bool observe_shared(std::uintptr_t address, int bytes, Access access);
  void count(std::uintptr_t address, int bytes, Access access, bool index);
  void end_thread();
  void end_phase();
  void end_block();

  std::string kernel_;
  detail::Footprint footprint_;
  std::vector<Interval> intervals_;
  static constexpr int kShadowPageBits = 12;
  /// Global bytes' shadows by page (address >> kShadowPageBits), allocated when a byte of the
  /// page is first accessed: the model's memory grows with what the launch touches.
  std::unordered_map<std::uintptr_t, std::unique_ptr<Shadow[]>> shadow_pages_;
  struct PageSlot {  // a page recently looked up
    std::uintptr_t number = 0;
    Shadow* page = nullptr;
  };
  static constexpr std::size_t kPageCache = 64;
  PageSlot page_cache_[kPageCache];
  std::int64_t block_stride_ = 1;
  GridCoord coord_;
  std::int32_t thread_id_ = 0;   ///< block * threads + thread (launches of < 2^31 threads)
  std::int32_t phase_ = 0;       ///< of a phased body; 0 otherwise
  std::uintptr_t shared_begin_ = 0, shared_end_ = 0;  ///< the current block's shared memory
  std::vector<Shadow> shared_shadow_;
  std::int64_t sequence_ = 0;    ///< accesses of the current thread so far
  std::unordered_map<WarpKey, WarpAccess, WarpKeyHash> warp_accesses_;
  std::unordered_set<std::uintptr_t> sectors_read_, sectors_written_, chunks_;
  std::int64_t accesses_ = 0, requested_ = 0, errors_ = 0;
  std::int64_t useful_bytes_ = 0, warp_sector_bytes_ = 0;  ///< of the blocks folded so far
  // Round trips: the current thread's in this phase, the most of any thread of this phase,
  // the current block's over its finished phases, and the finished blocks' total.
  bool batch_open_ = false;
  RoundTrips thread_trips_, phase_trips_, block_trips_, launch_trips_;
  std::int64_t block_ = -1;            ///< the block running (-1: none yet)
  bool block_accessed_ = false;
  std::int64_t blocks_observed_ = 0, blocks_run_ = 0, load_batches_ = 0, loaded_bytes_ = 0, stored_bytes_ = 0;
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
