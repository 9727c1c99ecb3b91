// SPDX-License-Identifier: Apache-2.0
// The GPU model of the host backend (see gpu_model.h).
#include "host/gpu_model.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace mlarope::kernels::gpu_model {

__thread Recorder* t_recorder = nullptr;

bool observe(Recorder& recorder, const void* address, int bytes, Access access) {
  return recorder.observe(address, bytes, access);
}

void end_load_batch(Recorder& recorder) { recorder.end_load_batch(); }
void begin_index_batch(Recorder& recorder) { recorder.begin_index_batch(); }
void end_index_batch(Recorder& recorder) { recorder.end_index_batch(); }
void async_copy(Recorder& recorder, void* to, const void* from, int bytes) {
  recorder.async_copy(to, from, bytes);
}
void wait_async_copies(Recorder& recorder) { recorder.wait_async_copies(); }

namespace {

constexpr int kWarp = 32;
constexpr std::uintptr_t kSector = 32;
constexpr std::uintptr_t kChunk = 1024;  // ModelLaunchStats::dram_chunks
constexpr std::size_t kMaxFindings = 8;

const char* access_name(Access a) {
  return a == Access::load ? "load" : a == Access::store ? "store" : "atomic";
}

// Visit the byte ranges [begin, end) of a region's innermost rows, rows that follow each other
// in memory as one range (a contiguous tensor is one).
template <class Visit>
void for_each_row(const detail::TensorRegion& r, Visit visit) {
  const int outer = r.rank - 1;
  std::int64_t index[kMaxRank] = {};
  const auto base = reinterpret_cast<std::uintptr_t>(r.data);
  const auto row_bytes = static_cast<std::uintptr_t>(r.shape[outer] * r.element_bytes);
  std::uintptr_t run_begin = 0, run_end = 0;  // the rows so far that follow each other
  for (;;) {
    std::int64_t offset = 0;
    for (int d = 0; d < outer; ++d) offset += index[d] * r.strides[d];
    const std::uintptr_t begin = base + static_cast<std::uintptr_t>(offset * r.element_bytes);
    if (run_end == run_begin || begin != run_end) {
      if (run_end != run_begin) visit(run_begin, run_end);
      run_begin = begin;
    }
    run_end = begin + row_bytes;
    int d = outer - 1;
    while (d >= 0 && ++index[d] == r.shape[d]) index[d--] = 0;
    if (d < 0) break;
  }
  if (run_end != run_begin) visit(run_begin, run_end);
}

}  // namespace

Recorder::Recorder(std::string kernel, const detail::Footprint& footprint,
                   std::int64_t block_stride)
    : kernel_(std::move(kernel)), footprint_(footprint),
      block_stride_(block_stride < 1 ? 1 : block_stride) {
  build_intervals();
}

Recorder::Page& Recorder::page_of(std::uintptr_t address) {
  const std::uintptr_t number = address >> kPageBits;
  PageSlot& slot = page_cache_[number % kPageCache];  // most accesses land on a recent page
  if (slot.page == nullptr || slot.number != number) slot = {number, &pages_[number]};
  return *slot.page;
}

Recorder::Shadow* Recorder::shadows_of(Page& page) {
  if (!page.shadow) {
    page.shadow = std::make_unique<Shadow[]>(kGranulesPerPage);
    ++shadow_pages_;
  }
  return page.shadow.get();
}

// Disjoint intervals of the footprint, each with the uses of the tensors covering it: a sweep
// over the rows of every tensor (broadcast rows, stride 0, coincide and count once).
void Recorder::build_intervals() {
  std::map<std::uintptr_t, std::vector<int>> starts, ends;  // address -> regions
  for (int i = 0; i < footprint_.count; ++i)
    for_each_row(footprint_.regions[static_cast<std::size_t>(i)],
                 [&](std::uintptr_t b, std::uintptr_t e) {
                   starts[b].push_back(i);
                   ends[e].push_back(i);
                 });
  std::vector<std::uintptr_t> points;
  points.reserve(starts.size() + ends.size());
  for (const auto& [a, _] : starts) points.push_back(a);
  for (const auto& [a, _] : ends) points.push_back(a);
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  std::vector<int> active(static_cast<std::size_t>(footprint_.count), 0);
  for (std::size_t k = 0; k + 1 < points.size(); ++k) {
    if (auto it = ends.find(points[k]); it != ends.end())
      for (int r : it->second) --active[static_cast<std::size_t>(r)];
    if (auto it = starts.find(points[k]); it != starts.end())
      for (int r : it->second) ++active[static_cast<std::size_t>(r)];
    Interval in{points[k], points[k + 1], -1, false, false, false, false};
    for (int r = 0; r < footprint_.count; ++r) {
      if (active[static_cast<std::size_t>(r)] <= 0) continue;
      if (in.region < 0) in.region = r;
      const detail::RegionUse use = footprint_.regions[static_cast<std::size_t>(r)].use;
      in.readable |= use == detail::RegionUse::read || use == detail::RegionUse::read_write;
      in.writable |= use == detail::RegionUse::write || use == detail::RegionUse::read_write;
      in.atomic |= use == detail::RegionUse::atomic;
      in.index |= footprint_.regions[static_cast<std::size_t>(r)].index;
    }
    if (in.region < 0) continue;
    Interval* last = intervals_.empty() ? nullptr : &intervals_.back();
    if (last && last->end == in.begin && last->region == in.region &&
        last->readable == in.readable && last->writable == in.writable &&
        last->atomic == in.atomic && last->index == in.index)
      last->end = in.end;
    else intervals_.push_back(in);
  }
}

const Recorder::Interval* Recorder::find(std::uintptr_t address, int bytes) const {
  const std::uintptr_t end = address + static_cast<std::uintptr_t>(bytes);
  if (last_interval_ != nullptr && address >= last_interval_->begin && end <= last_interval_->end)
    return last_interval_;  // accesses come in runs over one tensor
  auto it = std::upper_bound(intervals_.begin(), intervals_.end(), address,
                             [](std::uintptr_t a, const Interval& in) { return a < in.begin; });
  if (it == intervals_.begin()) return nullptr;
  --it;
  return end <= it->end ? &*it : nullptr;
}

void Recorder::begin_thread(const GridCoord& coord) {
  end_thread();
  if (coord.block != block_) {  // a body without phases: one epoch a block
    end_block(), start_block(coord.block);
    block_epoch_ = ++epoch_;
  }
  coord_ = coord;
  sequence_ = 0;
}

void Recorder::begin_phase(std::int64_t block, int phase, const void* shared, std::size_t bytes) {
  end_phase();
  if (epoch_ == UINT32_MAX)
    throw std::length_error("GPU model: a launch of more than 2^32 - 1 block phases");
  ++epoch_;
  if (block != block_) end_block(), start_block(block), block_epoch_ = epoch_;
  phase_ = phase;
  if (phase != 0) return;
  shared_begin_ = reinterpret_cast<std::uintptr_t>(shared);  // a new block: fresh shared memory
  shared_end_ = shared_begin_ + bytes;
  shared_shadow_.assign((bytes >> kGranuleBits) + 1, Shadow{});
}

// True when an access by `thread` of the block in `epoch` is ordered before the current one:
// the same block (its epochs run from block_epoch_ on) in an earlier phase (a barrier lies
// between), or the same thread.
bool Recorder::ordered_before(std::uint32_t epoch, std::uint16_t thread) const {
  return epoch >= block_epoch_ &&
         (epoch < epoch_ || thread == static_cast<std::uint16_t>(coord_.thread));
}

bool Recorder::observe_shared(std::uintptr_t a, int bytes, Access access) {
  const auto* address = reinterpret_cast<const void*>(a);
  if (a + static_cast<std::uintptr_t>(bytes) > shared_end_) {
    report(std::string("out-of-bounds shared ") + access_name(access), address, bytes);
    return false;
  }
  if (access == Access::atomic) return true;
  if (lands_in(a, bytes)) {
    report(std::string("shared ") + access_name(access) +
               " of bytes an asynchronous copy of this thread has not landed in (no "
               "wait_async_copies between)",
           address, bytes);
    return false;
  }
  // Judged at the end of the phase: a store of another thread later in this phase makes it a
  // race, which check_race reports at that store.
  if (access == Access::load && !written_in_block(a, bytes))
    unwritten_loads_.push_back({a, bytes, coord_.thread});
  // A store to shared memory waits for the load it stores, as a global store does: the batch ends.
  if (access == Access::store) batch_open_ = false;
  check_race(shared_shadow(), a, bytes, access);
  return true;
}

void Recorder::report_unwritten_loads() {
  const GridCoord running = coord_;
  for (const UnwrittenLoad& u : unwritten_loads_) {
    if (written_in_block(u.address, u.bytes)) continue;
    coord_.thread = u.thread;
    report("shared load of bytes no thread of this block has written (a block's shared memory "
           "starts undefined: it holds what an earlier block left there)",
           reinterpret_cast<const void*>(u.address), u.bytes);
  }
  coord_ = running;
  unwritten_loads_.clear();
}

bool Recorder::written_in_block(std::uintptr_t address, int bytes) {
  const std::uintptr_t last = (address + static_cast<std::uintptr_t>(bytes) - 1) >> kGranuleBits;
  for (std::uintptr_t granule = address >> kGranuleBits; granule <= last; ++granule)
    if (shared_shadow()(granule).writer_epoch == 0) return false;  // shadows start each block at 0
  return true;
}

bool Recorder::lands_in(std::uintptr_t address, int bytes) const {
  const std::uintptr_t end = address + static_cast<std::uintptr_t>(bytes);
  for (const AsyncCopy& c : async_copies_)
    if (address < c.to + static_cast<std::uintptr_t>(c.bytes) && c.to < end) return true;
  return false;
}

void Recorder::async_copy(void* to, const void* from, int bytes) {
  const auto t = reinterpret_cast<std::uintptr_t>(to);
  const auto f = reinterpret_cast<std::uintptr_t>(from);
  if (t < shared_begin_ || t >= shared_end_ ||
      t + static_cast<std::uintptr_t>(bytes) > shared_end_) {
    report("asynchronous copy to bytes outside the block's shared memory", to, bytes);
    return;
  }
  if (f >= shared_begin_ && f < shared_end_) {
    report("asynchronous copy from shared memory (its source must be global)", from, bytes);
    return;
  }
  if (t % static_cast<std::uintptr_t>(bytes) != 0)
    report("misaligned " + std::to_string(bytes) + "-byte asynchronous copy to shared memory", to,
           bytes);
  if (lands_in(t, bytes)) {
    report("asynchronous copy to bytes an earlier one of this thread has not landed in (the "
           "order in which they land is not defined)",
           to, bytes);
    return;
  }
  if (!observe(from, bytes, Access::load)) return;  // the global side: a load of the batch
  // The shared side is written by the copy, not by a store of the thread: the batch goes on.
  check_race(shared_shadow(), t, bytes, Access::store);
  AsyncCopy c{t, bytes, {}};
  std::memcpy(c.data, from, static_cast<std::size_t>(bytes));
  async_copies_.push_back(c);
}

void Recorder::wait_async_copies() {
  for (const AsyncCopy& c : async_copies_)
    std::memcpy(reinterpret_cast<void*>(c.to), c.data, static_cast<std::size_t>(c.bytes));
  async_copies_.clear();
  batch_open_ = false;
}

void Recorder::report(const std::string& what, const void* address, int bytes) {
  ++errors_;
  if (findings_.size() >= kMaxFindings) return;
  char where[160];
  std::snprintf(where, sizeof where, "%s block %lld thread %d: ", kernel_.c_str(),
                static_cast<long long>(coord_.block), coord_.thread);
  char at[96];
  std::snprintf(at, sizeof at, " (%d bytes at %p)", bytes, address);
  findings_.push_back(where + what + at);
}

bool Recorder::observe(const void* address, int bytes, Access access) {
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  if (a % static_cast<std::uintptr_t>(bytes) != 0)
    report(std::string("misaligned ") + std::to_string(bytes) + "-byte " + access_name(access),
           address, bytes);
  if (a >= shared_begin_ && a < shared_end_) return observe_shared(a, bytes, access);
  const Interval* in = find(a, bytes);
  if (in == nullptr) {
    report(std::string("out-of-bounds ") + access_name(access) +
               ": outside every tensor of the call",
           address, bytes);
    return false;
  }
  const char* name = footprint_.regions[static_cast<std::size_t>(in->region)].name;
  if (access == Access::atomic && !in->atomic)
    report(std::string("atomic access to ") + name + ", which is not a status word", address,
           bytes);
  if (access != Access::atomic && in->atomic)
    report(std::string("plain ") + access_name(access) + " of status word " + name, address, bytes);
  if (access == Access::store && !in->writable && !in->atomic)
    report(std::string("store to input ") + name, address, bytes);
  if (access == Access::load && !in->readable && in->writable)
    report(std::string("load of output ") + name + " (an out-of-place output is write-only)",
           address, bytes);
  if (access == Access::atomic) return true;
  last_interval_ = in;
  Page& first_page = page_of(a);
  if (in->writable) {  // bytes no thread may write need no shadow: a store there is reported
    const std::uintptr_t page_number = a >> kPageBits;
    Shadow* page = shadows_of(first_page);  // an access spans two pages at most
    check_race(
        [&](std::uintptr_t granule) -> Shadow& {
          return (granule << kGranuleBits >> kPageBits) == page_number
                     ? page[granule & (kGranulesPerPage - 1)]
                     : shadows_of(
                           page_of(granule << kGranuleBits))[granule & (kGranulesPerPage - 1)];
        },
        a, bytes, access);
  }
  count(a, bytes, access, in->index, first_page);
  return true;
}

// Check the granules of [address, address + bytes) for a race with an earlier access of the
// launch, and record this one; shadow_of(granule number) gives a granule's shadow.
template <class ShadowOf>
void Recorder::check_race(ShadowOf shadow_of, std::uintptr_t address, int bytes, Access access) {
  const auto thread = static_cast<std::uint16_t>(coord_.thread);
  // The recorded read of a granule comes before this access. Several readers do only when all
  // are of this block's earlier phases (kSeveral with its latest epoch among them).
  const auto reads_ordered_before = [this](const Shadow& s, bool several) {
    return several ? s.reader_thread == kSeveral && s.reader_epoch >= block_epoch_ &&
                         s.reader_epoch < epoch_
                   : ordered_before(s.reader_epoch, s.reader_thread);
  };
  const std::uintptr_t last = (address + static_cast<std::uintptr_t>(bytes) - 1) >> kGranuleBits;
  for (std::uintptr_t granule = address >> kGranuleBits; granule <= last; ++granule) {
    Shadow& s = shadow_of(granule);
    const bool write_race = s.writer_epoch != 0 && !ordered_before(s.writer_epoch, s.writer_thread);
    const bool several = s.reader_thread == kSeveral || s.reader_thread == kSeveralBlocks;
    const bool read_race =
        access == Access::store && s.reader_epoch != 0 && !reads_ordered_before(s, several);
    if (write_race || read_race) {
      const std::uint16_t other = write_race ? s.writer_thread : s.reader_thread;
      const bool this_block = (write_race ? s.writer_epoch : s.reader_epoch) >= block_epoch_;
      const std::string who = !write_race && several
                                  ? std::string("several other threads read")
                                  : "thread " + std::to_string(other) + " of " +
                                        (this_block ? "this block" : "another block") +
                                        (write_race ? " wrote" : " read");
      report(std::string("race: ") + access_name(access) + " of a byte that " + who +
                 " in the same launch" + (phase_ > 0 ? ", with no barrier between" : ""),
             reinterpret_cast<const void*>(address), bytes);
      return;  // one finding per access
    }
    if (access == Access::store) {
      s.writer_epoch = epoch_, s.writer_thread = thread;
    } else if (s.reader_epoch == 0 || reads_ordered_before(s, several)) {
      s.reader_epoch = epoch_, s.reader_thread = thread;  // replaces the reads ordered before it
    } else {
      s.reader_thread = s.reader_thread != kSeveralBlocks && s.reader_epoch >= block_epoch_
                            ? kSeveral
                            : kSeveralBlocks;
      s.reader_epoch = epoch_;
    }
  }
}

void Recorder::count(std::uintptr_t address, int bytes, Access access, bool index,
                     Page& first_page) {
  ++accesses_;
  requested_ += bytes;
  block_accessed_ = true;
  if (access == Access::store) {  // a store needs what was loaded before it: the batch ends
    batch_open_ = false;
    stored_bytes_ += bytes;
  } else if (index) {  // its value is an address to come: a round trip of its own
    batch_open_ = false;
    if (index_batch_ != IndexBatch::counted) ++thread_trips_.index;  // unless its batch's is
    if (index_batch_ == IndexBatch::open) index_batch_ = IndexBatch::counted;
    ++index_loads_;
  } else {
    if (!batch_open_) batch_open_ = true, batch_bytes_ = 0, ++thread_trips_.data, ++load_batches_;
    loaded_bytes_ += bytes;
    batch_bytes_ += bytes;
    largest_batch_bytes_ = std::max(largest_batch_bytes_, batch_bytes_);
  }
  const std::uintptr_t end = address + static_cast<std::uintptr_t>(bytes);
  if (coalescing_block_)
    warp_records_.push_back({coord_.thread / kWarp, sequence_++, address, end});
  const bool store = access == Access::store;
  for (std::uintptr_t s = address / kSector; s <= (end - 1) / kSector; ++s) {
    Page& page =
        (s * kSector) >> kPageBits == address >> kPageBits ? first_page : page_of(s * kSector);
    const std::uintptr_t bit = s % (std::uintptr_t{1} << (kPageBits - 5));  // 128 sectors a page
    std::uint64_t& word = (store ? page.written : page.read)[bit / 64];
    const std::uint64_t mask = std::uint64_t{1} << (bit % 64);
    if (word & mask) continue;
    word |= mask;
    ++(store ? sectors_written_ : sectors_read_);
    const auto chunk = static_cast<std::uint8_t>(1u << ((s * kSector & kPageMask) / kChunk));
    if (!(page.chunks & chunk)) page.chunks |= chunk, ++chunks_;  // a new sector's chunk
  }
}

namespace {

// Distinct bytes and distinct 32-byte sectors of byte ranges [first, last), sorted.
template <class It>
std::pair<std::int64_t, std::int64_t> distinct_bytes_and_sectors(It first, It last) {
  std::int64_t bytes = 0, sectors = 0;
  std::uintptr_t covered = 0, last_sector = ~std::uintptr_t{0};
  for (It it = first; it != last; ++it) {
    const auto [begin, end] = *it;
    const std::uintptr_t from = std::max(begin, covered);
    if (end > from) bytes += static_cast<std::int64_t>(end - from);
    covered = std::max(covered, end);
    for (std::uintptr_t s = begin / kSector; s <= (end - 1) / kSector; ++s)
      if (last_sector == ~std::uintptr_t{0} || s > last_sector) ++sectors, last_sector = s;
  }
  return {bytes, sectors};
}

}  // namespace

void Recorder::end_thread() {
  if (!async_copies_.empty()) {  // they may land after the barrier: dropped, as unordered
    report(std::to_string(async_copies_.size()) +
               " asynchronous copies not waited for (wait_async_copies) before the barrier",
           reinterpret_cast<const void*>(async_copies_.front().to), async_copies_.front().bytes);
    async_copies_.clear();
  }
  batch_open_ = false;
  index_batch_ = IndexBatch::none;
  phase_trips_.at_least(thread_trips_);
  thread_trips_ = {};
}

// The phase's accesses as warp accesses (the accesses of a warp's threads with the same number
// in the phase), grouped by a counting sort on (warp, number) and folded into the coalescing
// figures: linear in the accesses, whatever their order.
void Recorder::fold_warp_accesses() {
  if (warp_records_.empty()) return;
  peak_records_ = std::max(peak_records_, warp_records_.size());
  std::int64_t numbers = 0;
  int warps = 0;
  for (const WarpRecord& r : warp_records_)
    numbers = std::max(numbers, r.sequence + 1), warps = std::max(warps, r.warp + 1);
  const auto key = [numbers](const WarpRecord& r) {
    return static_cast<std::size_t>(r.warp * numbers + r.sequence);
  };
  group_start_.assign(static_cast<std::size_t>(warps * numbers) + 1, 0);
  for (const WarpRecord& r : warp_records_) ++group_start_[key(r) + 1];
  for (std::size_t k = 1; k < group_start_.size(); ++k) group_start_[k] += group_start_[k - 1];
  grouped_.resize(warp_records_.size());
  group_fill_.assign(group_start_.begin(), group_start_.end() - 1);
  for (const WarpRecord& r : warp_records_) grouped_[group_fill_[key(r)]++] = {r.begin, r.end};
  for (std::size_t k = 0; k + 1 < group_start_.size(); ++k) {
    if (group_start_[k] == group_start_[k + 1]) continue;
    const auto first = grouped_.begin() + static_cast<std::ptrdiff_t>(group_start_[k]);
    const auto last = grouped_.begin() + static_cast<std::ptrdiff_t>(group_start_[k + 1]);
    for (auto it = first + 1; it < last; ++it)  // insertion sort: a warp's 32 ranges at most
      for (auto j = it; j > first && *j < *(j - 1); --j) std::iter_swap(j, j - 1);
    const auto [bytes, sectors] = distinct_bytes_and_sectors(first, last);
    useful_bytes_ += bytes;
    warp_sector_bytes_ += sectors * static_cast<std::int64_t>(kSector);
  }
  warp_records_.clear();
}

void Recorder::end_phase() {
  end_thread();
  report_unwritten_loads();
  fold_warp_accesses();
  block_trips_.add(phase_trips_);
  phase_trips_ = {};
}

void Recorder::start_block(std::int64_t block) {
  block_ = block;
  const std::int64_t stride = block_stride_ > 1 ? block_stride_ : kCoalescingStride;
  coalescing_block_ = block / kSampleRun % stride == 0;
}

// The block's critical path into the launch's, and its warps' records folded into the
// coalescing figures and freed: the model's memory grows with a block, not with the launch.
void Recorder::end_block() {
  end_phase();
  if (block_ >= 0) ++blocks_observed_;
  if (block_accessed_) {
    launch_trips_.add(block_trips_);
    ++blocks_run_;
  }
  block_trips_ = {};
  block_accessed_ = false;
}

void Recorder::finish() {
  end_block();
  block_ = -1;
}

LaunchStats Recorder::stats() const {
  LaunchStats s;
  s.kernel = kernel_;
  s.blocks = coord_.num_blocks;
  s.threads = coord_.num_threads;
  s.accesses = accesses_;
  s.requested_bytes = requested_;
  s.useful_bytes = useful_bytes_;
  s.warp_sector_bytes = warp_sector_bytes_;
  s.dram_bytes = (sectors_read_ + sectors_written_) * static_cast<std::int64_t>(kSector);
  s.errors = errors_;
  s.blocks_observed = blocks_observed_;
  s.blocks_run = blocks_run_;
  s.round_trips = launch_trips_.data;
  s.index_round_trips = launch_trips_.index;
  s.load_phases = launch_trips_.phases;
  s.load_batches = load_batches_;
  s.loaded_bytes = loaded_bytes_;
  s.largest_batch_bytes = largest_batch_bytes_;
  s.stored_bytes = stored_bytes_;
  s.dram_chunks = chunks_;
  s.index_loads = index_loads_;
  // The model's state: a page record (with its hash node) per page touched, the shadows of
  // the writable pages, the largest phase's access records.
  constexpr std::int64_t kNodeBytes = 32;
  s.model_bytes =
      static_cast<std::int64_t>(pages_.size()) *
          (static_cast<std::int64_t>(sizeof(Page)) + kNodeBytes) +
      shadow_pages_ * static_cast<std::int64_t>(kGranulesPerPage * sizeof(Shadow)) +
      static_cast<std::int64_t>(peak_records_ * (sizeof(WarpRecord) + 3 * sizeof(std::size_t)));
  std::int64_t both = 0;  // sectors read and written
  for (const auto& [_, page] : pages_)
    for (int w = 0; w < 2; ++w) both += __builtin_popcountll(page.read[w] & page.written[w]);
  s.touched_bytes = (sectors_read_ + sectors_written_ - both) * static_cast<std::int64_t>(kSector);
  return s;
}

}  // namespace mlarope::kernels::gpu_model
