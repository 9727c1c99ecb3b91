// SPDX-License-Identifier: Apache-2.0
// The host grid executor: runs every block and thread of a launch on the CPU, in an order drawn
// from a seed (block order, and thread order within each block), in parallel over blocks on
// std::threads. Threads of a block run one after the other, so a kernel body that depends on
// the order of threads or blocks gives seed-dependent results (docs/architecture.md rule 3).
// Grids of up to 1023 blocks (every test-sized launch) are fully shuffled: blocks, and threads
// within each block. Larger grids, where the order is about speed more than about finding
// order dependence, are cut into about 8 tiles per worker of consecutive blocks whose order
// is shuffled, and each block runs its threads in a rotated (possibly reversed) order, so that
// memory is still streamed.
// It knows nothing about RoPE: it calls a function of (arguments, GridCoord).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/grid.h"
#include "kernels/portability.h"

namespace mlarope::host {

using kernels::GridCoord;
using kernels::GridShape;

/// A pseudo-random bijection of [0, size) keyed by `key`: a 4-round Feistel network on the
/// smallest even number of bits covering `size`, with cycle walking. O(1) memory.
class IndexPermutation {
 public:
  /// The permutation of [0, size) for `key`.
  IndexPermutation(std::uint64_t size, std::uint64_t key);
  /// The index at position `index` (< size) of the order.
  std::uint64_t operator()(std::uint64_t index) const;

 private:
  std::uint64_t encrypt(std::uint64_t x) const;

  std::uint64_t size_;
  int half_bits_;
  std::uint64_t half_mask_;
  std::uint64_t round_keys_[4];
};

/// Told before each (block, thread) of a launch runs: the GPU model (gpu_model.h) uses it to
/// know whose accesses it sees.
class ThreadObserver {
 public:
  virtual ~ThreadObserver() = default;
  virtual void begin_thread(const GridCoord& coord) = 0;
  /// A block of a phased launch starts phase `phase` (its threads follow), with its shared
  /// memory at [shared, shared + bytes).
  virtual void begin_phase(std::int64_t block, int phase, const void* shared, std::size_t bytes) {
    (void)block, (void)phase, (void)shared, (void)bytes;
  }
  /// Whether block `block` runs at all: an observer that samples a launch skips the rest.
  virtual bool runs_block(std::int64_t block) const {
    (void)block;
    return true;
  }
};

/// Runs launches on the CPU; `threads` workers (0: all hardware threads).
class HostExecutor {
 public:
  /// A type-erased kernel: body(args, coord) for every coord of the grid.
  using Body = void (*)(const void* args, const GridCoord& coord);

  /// An executor drawing orders from `seed`, with `threads` workers (0: hardware threads).
  explicit HostExecutor(std::uint64_t seed = 0, int threads = 0);

  /// Run body(args, coord) for every block and thread of `grid`; returns when all ran.
  void run(GridShape grid, Body body, const void* args) const;

  /// Run body(args, coord) for thread 0 of every block of `grid` alone (coord.num_threads is
  /// still grid.threads), blocks in the order and over the workers that run() would take: for
  /// a body whose other threads return at once (the host's fast branches), where each of
  /// their calls would cost a call and a draw of the thread order for nothing.
  void run_thread_zero(GridShape grid, Body body, const void* args) const;

  /// A type-erased phased kernel (kernels/portability.h: block barriers and shared memory).
  using PhasedBody = void (*)(const void* args, const GridCoord& coord, std::int64_t phase,
                              void* shared);
  /// Phases of the block at `coord` (every round's, numbered on across rounds).
  using PhaseCount = std::int64_t (*)(const void* args, const GridCoord& coord);
  /// Run a phased kernel: each block gets `shared_bytes` of shared memory (poisoned with
  /// 0xA5), and every thread of the block runs phase p before any runs phase p + 1 (thread
  /// order drawn anew per phase).
  void run_phased(GridShape grid, PhaseCount phases, std::size_t shared_bytes, PhasedBody body,
                  const void* args) const;

  /// The seed of the orders.
  std::uint64_t seed() const { return seed_; }
  /// Number of worker threads.
  int threads() const { return threads_; }
  /// The same executor on one worker, telling `observer` before each thread runs.
  HostExecutor observed_by(ThreadObserver* observer) const {
    HostExecutor e(seed_, 1);
    e.observer_ = observer;
    return e;
  }

 private:
  void run_block(GridShape grid, std::int64_t block, bool full_shuffle, Body body,
                 const void* args) const;
  template <class PerBlock>
  void for_each_block(GridShape grid, PerBlock per_block) const;

  std::uint64_t seed_;
  int threads_;
  ThreadObserver* observer_ = nullptr;
};

/// A typed kernel body bound to its arguments, as HostExecutor::Body's arguments.
template <class Args>
struct BoundBody {
  void (*body)(const Args&, const GridCoord&);
  const Args* args;
  static void call(const void* p, const GridCoord& coord) {
    const BoundBody* b = static_cast<const BoundBody*>(p);
    b->body(*b->args, coord);
  }
};

/// Run a typed kernel body, body(args, coord), on `executor`.
template <class Args>
void launch(const HostExecutor& executor, GridShape grid,
            void (*body)(const Args&, const GridCoord&), const Args& args) {
  const BoundBody<Args> bound{body, &args};
  executor.run(grid, &BoundBody<Args>::call, &bound);
}

/// Run a typed kernel body whose threads other than 0 do nothing: thread 0 of each block of
/// `grid` alone (HostExecutor::run_thread_zero).
template <class Args>
void launch_thread_zero(const HostExecutor& executor, GridShape grid,
                        void (*body)(const Args&, const GridCoord&), const Args& args) {
  const BoundBody<Args> bound{body, &args};
  executor.run_thread_zero(grid, &BoundBody<Args>::call, &bound);
}

/// Run a phased kernel body Body (kernels/portability.h) with arguments `args` on `executor`.
template <class Body, class Args>
void launch_phased(const HostExecutor& executor, GridShape grid, const Args& args) {
  executor.run_phased(
      grid,
      [](const void* a, const GridCoord& coord) {
        return kernels::PhasesOf<Body>::count(*static_cast<const Args*>(a), coord);
      },
      sizeof(typename Body::Shared),
      [](const void* a, const GridCoord& coord, std::int64_t phase, void* shared) {
        Body::phase(*static_cast<const Args*>(a), coord, phase,
                    *static_cast<typename Body::Shared*>(shared));
      },
      &args);
}

}  // namespace mlarope::host
