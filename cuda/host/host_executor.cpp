// SPDX-License-Identifier: Apache-2.0
// The host grid executor (see host_executor.h).
#include "host/host_executor.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

namespace mlarope::host {
namespace {

// SplitMix64's finaliser: a strong 64-bit mixing function.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int bits_for(std::uint64_t size) {
  int bits = 2;
  while (bits < 64 && (std::uint64_t{1} << bits) < size) bits += 2;
  return bits;
}

}  // namespace

IndexPermutation::IndexPermutation(std::uint64_t size, std::uint64_t key) : size_(size) {
  half_bits_ = bits_for(size) / 2;
  half_mask_ = half_bits_ >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << half_bits_) - 1;
  std::uint64_t k = key;
  for (std::uint64_t& round_key : round_keys_) round_key = k = mix(k);
}

std::uint64_t IndexPermutation::encrypt(std::uint64_t x) const {
  std::uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (std::uint64_t round_key : round_keys_) {
    const std::uint64_t next_left = right;
    right = left ^ (mix(right ^ round_key) & half_mask_);
    left = next_left;
  }
  return (left << half_bits_) | right;
}

std::uint64_t IndexPermutation::operator()(std::uint64_t index) const {
  std::uint64_t x = index;
  do x = encrypt(x);
  while (x >= size_);  // cycle walking: stays a bijection of [0, size)
  return x;
}

HostExecutor::HostExecutor(std::uint64_t seed, int threads) : seed_(seed), threads_(threads) {
  if (threads_ <= 0) threads_ = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

namespace {

// Blocks per tile of the block order: 1 (every block placed at random) up to 1023 blocks,
// then about 8 tiles per worker; large grids stream through memory.
std::int64_t tile_of(std::int64_t blocks, std::int64_t workers) {
  if (blocks < 1024) return 1;
  return std::max<std::int64_t>(1, blocks / (workers * 8));
}

// The thread order of one block of a large grid: a rotation, maybe reversed. Cheaper on the
// memory system than a full shuffle (threads of a block mostly touch consecutive memory), and
// still puts any thread before or after any other for some seed.
class ThreadRotation {
 public:
  ThreadRotation(int threads, std::uint64_t key)
      : threads_(threads), offset_(static_cast<int>(key % static_cast<std::uint64_t>(threads))),
        reversed_(((key >> 32) & 1) != 0) {}
  int operator()(int t) const {
    const int x = (t + offset_) % threads_;
    return reversed_ ? threads_ - 1 - x : x;
  }

 private:
  int threads_, offset_;
  bool reversed_;
};

}  // namespace

void HostExecutor::run_block(GridShape grid, std::int64_t block, bool full_shuffle, Body body,
                             const void* args) const {
  const std::uint64_t key = mix(seed_ ^ mix(static_cast<std::uint64_t>(block) + 1));
  GridCoord coord{block, grid.blocks, 0, grid.threads};
  if (full_shuffle) {
    const IndexPermutation thread_order(static_cast<std::uint64_t>(grid.threads), key);
    for (int t = 0; t < grid.threads; ++t) {
      coord.thread = static_cast<int>(thread_order(static_cast<std::uint64_t>(t)));
      if (observer_) observer_->begin_thread(coord);
      body(args, coord);
    }
    return;
  }
  const ThreadRotation thread_order(grid.threads, key);
  for (int t = 0; t < grid.threads; ++t) {
    coord.thread = thread_order(t);
    if (observer_) observer_->begin_thread(coord);
    body(args, coord);
  }
}

// Call per_block(block, full_shuffle) for every block, tiles of blocks in a seeded order, in
// parallel over the workers for large launches.
template <class PerBlock>
void HostExecutor::for_each_block(GridShape grid, PerBlock per_block) const {
  const std::int64_t tile = tile_of(grid.blocks, threads_);
  const std::int64_t tiles = (grid.blocks + tile - 1) / tile;
  const IndexPermutation tile_order(static_cast<std::uint64_t>(tiles), mix(seed_));
  // Small launches run on the calling thread: starting workers would cost more than they save.
  constexpr std::int64_t kMinParallelCalls = 1024;
  const std::int64_t calls = grid.blocks * grid.threads;
  const std::int64_t workers =
      calls < kMinParallelCalls ? 1 : std::min<std::int64_t>(threads_, tiles);
  std::atomic<std::int64_t> next{0};
  auto work = [&] {
    for (;;) {
      const std::int64_t k = next.fetch_add(1, std::memory_order_relaxed);
      if (k >= tiles) return;
      const auto first =
          static_cast<std::int64_t>(tile_order(static_cast<std::uint64_t>(k))) * tile;
      const std::int64_t last = std::min(first + tile, grid.blocks);
      for (std::int64_t block = first; block < last; ++block)
        if (!observer_ || observer_->runs_block(block)) per_block(block, tile == 1);
    }
  };
  std::vector<std::thread> helpers;
  for (std::int64_t w = 1; w < workers; ++w) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
}

void HostExecutor::run(GridShape grid, Body body, const void* args) const {
  if (grid.blocks <= 0 || grid.threads <= 0) return;
  for_each_block(grid, [&](std::int64_t block, bool full_shuffle) {
    run_block(grid, block, full_shuffle, body, args);
  });
}

void HostExecutor::run_thread_zero(GridShape grid, Body body, const void* args) const {
  if (grid.blocks <= 0 || grid.threads <= 0) return;
  for_each_block(grid, [&](std::int64_t block, bool) {
    const GridCoord coord{block, grid.blocks, 0, grid.threads};
    if (observer_) observer_->begin_thread(coord);
    body(args, coord);
  });
}

void HostExecutor::run_phased(GridShape grid, PhaseCount phases, std::size_t shared_bytes,
                              PhasedBody body, const void* args) const {
  if (grid.blocks <= 0 || grid.threads <= 0) return;
  struct alignas(16) Chunk {
    unsigned char bytes[16];
  };
  for_each_block(grid, [&](std::int64_t block, bool) {
    std::vector<Chunk> shared((shared_bytes + sizeof(Chunk) - 1) / sizeof(Chunk));
    std::memset(shared.data(), 0xA5, shared.size() * sizeof(Chunk));  // not zeroed on a GPU either
    GridCoord coord{block, grid.blocks, 0, grid.threads};
    const std::int64_t count = phases(args, coord);
    for (std::int64_t phase = 0; phase < count; ++phase) {
      if (observer_)
        observer_->begin_phase(block, static_cast<int>(phase), shared.data(), shared_bytes);
      const std::uint64_t key = mix(seed_ ^ mix(static_cast<std::uint64_t>(block) + 1) ^
                                    mix(static_cast<std::uint64_t>(phase) + 0x5151));
      const IndexPermutation thread_order(static_cast<std::uint64_t>(grid.threads), key);
      for (int t = 0; t < grid.threads; ++t) {
        coord.thread = static_cast<int>(thread_order(static_cast<std::uint64_t>(t)));
        if (observer_) observer_->begin_thread(coord);
        body(args, coord, phase, shared.data());
      }
    }
  });
}

}  // namespace mlarope::host
