// The GPU model of the host backend (see gpu_model.h).
#include "host/gpu_model.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

namespace mlarope::kernels::gpu_model {

__thread Recorder* t_recorder = nullptr;

bool observe(Recorder& recorder, const void* address, int bytes, Access access) {
  return recorder.observe(address, bytes, access);
}

namespace {

constexpr int kWarp = 32;
constexpr std::uintptr_t kSector = 32;
constexpr std::uintptr_t kChunk = 1024;  // ModelLaunchStats::dram_chunks
constexpr std::size_t kMaxFindings = 8;

const char* access_name(Access a) {
  return a == Access::load ? "load" : a == Access::store ? "store" : "atomic";
}

// Visit the byte range [begin, end) of every innermost row of a region.
template <class Visit>
void for_each_row(const detail::TensorRegion& r, Visit visit) {
  const int outer = r.rank - 1;
  std::int64_t index[kMaxRank] = {};
  const auto base = reinterpret_cast<std::uintptr_t>(r.data);
  const auto row_bytes = static_cast<std::uintptr_t>(r.shape[outer] * r.element_bytes);
  for (;;) {
    std::int64_t offset = 0;
    for (int d = 0; d < outer; ++d) offset += index[d] * r.strides[d];
    const std::uintptr_t begin = base + static_cast<std::uintptr_t>(offset * r.element_bytes);
    visit(begin, begin + row_bytes);
    int d = outer - 1;
    while (d >= 0 && ++index[d] == r.shape[d]) index[d--] = 0;
    if (d < 0) return;
  }
}

}  // namespace

Recorder::Recorder(std::string kernel, const detail::Footprint& footprint, std::int64_t block_stride)
    : kernel_(std::move(kernel)), footprint_(footprint), block_stride_(block_stride < 1 ? 1 : block_stride) {
  build_intervals();
}

Recorder::Shadow& Recorder::global_shadow(std::uintptr_t address) {
  const std::uintptr_t number = address >> kShadowPageBits;
  PageSlot& slot = page_cache_[number % kPageCache];  // most accesses land on a recent page
  if (slot.page == nullptr || slot.number != number) {
    std::unique_ptr<Shadow[]>& page = shadow_pages_[number];
    if (!page) page = std::make_unique<Shadow[]>(std::size_t{1} << kShadowPageBits);
    slot = {number, page.get()};
  }
  return slot.page[address & ((std::uintptr_t{1} << kShadowPageBits) - 1)];
}

// Disjoint intervals of the footprint, each with the uses of the tensors covering it: a sweep
// over the rows of every tensor (broadcast rows, stride 0, coincide and count once).
void Recorder::build_intervals() {
  std::map<std::uintptr_t, std::vector<int>> starts, ends;  // address -> regions
  for (int i = 0; i < footprint_.count; ++i)
    for_each_row(footprint_.regions[static_cast<std::size_t>(i)], [&](std::uintptr_t b, std::uintptr_t e) {
      starts[b].push_back(i);
      ends[e].push_back(i);
    });
  std::vector<std::uintptr_t> points;
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
        last->readable == in.readable && last->writable == in.writable && last->atomic == in.atomic &&
        last->index == in.index)
      last->end = in.end;
    else
      intervals_.push_back(in);
  }
}

const Recorder::Interval* Recorder::find(std::uintptr_t address, int bytes) const {
  auto it = std::upper_bound(intervals_.begin(), intervals_.end(), address,
                             [](std::uintptr_t a, const Interval& in) { return a < in.begin; });
  if (it == intervals_.begin()) return nullptr;
  --it;
  return address + static_cast<std::uintptr_t>(bytes) <= it->end ? &*it : nullptr;
}

void Recorder::begin_thread(const GridCoord& coord) {
  end_thread();
  if (coord.block != block_) end_block(), block_ = coord.block;  // a body without phases
  coord_ = coord;
  thread_id_ = static_cast<std::int32_t>(coord.block * coord.num_threads + coord.thread);
  sequence_ = 0;
}

void Recorder::begin_phase(std::int64_t block, int phase, const void* shared, std::size_t bytes) {
  end_phase();
  if (block != block_) end_block(), block_ = block;
  phase_ = phase;
  if (phase != 0) return;
  shared_begin_ = reinterpret_cast<std::uintptr_t>(shared);  // a new block: fresh shared memory
  shared_end_ = shared_begin_ + bytes;
  shared_shadow_.assign(bytes, Shadow{});
}

// True when an access by (thread, phase) is ordered before the current one: the same thread,
// or the same block in an earlier phase (a barrier lies between).
bool Recorder::ordered_before(std::int32_t thread, std::int32_t phase) const {
  if (thread == thread_id_) return true;
  const std::int32_t threads = coord_.num_threads;
  return thread / threads == thread_id_ / threads && phase < phase_;
}

bool Recorder::observe_shared(std::uintptr_t a, int bytes, Access access) {
  const auto* address = reinterpret_cast<const void*>(a);
  if (a + static_cast<std::uintptr_t>(bytes) > shared_end_) {
    report(std::string("out-of-bounds shared ") + access_name(access), address, bytes);
    return false;
  }
  if (access == Access::atomic) return true;
  check_race([this](std::uintptr_t byte) -> Shadow& { return shared_shadow_[byte - shared_begin_]; }, a, bytes,
             access);
  return true;
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
    report(std::string("misaligned ") + std::to_string(bytes) + "-byte " + access_name(access), address, bytes);
  if (a >= shared_begin_ && a < shared_end_) return observe_shared(a, bytes, access);
  const Interval* in = find(a, bytes);
  if (in == nullptr) {
    report(std::string("out-of-bounds ") + access_name(access) + ": outside every tensor of the call",
           address, bytes);
    return false;
  }
  const char* name = footprint_.regions[static_cast<std::size_t>(in->region)].name;
  if (access == Access::atomic && !in->atomic)
    report(std::string("atomic access to ") + name + ", which is not a status word", address, bytes);
  if (access != Access::atomic && in->atomic)
    report(std::string("plain ") + access_name(access) + " of status word " + name, address, bytes);
  if (access == Access::store && !in->writable && !in->atomic)
    report(std::string("store to input ") + name, address, bytes);
  if (access == Access::load && !in->readable && in->writable)
    report(std::string("load of output ") + name + " (an out-of-place output is write-only)",
           address, bytes);
  if (access == Access::atomic) return true;
  constexpr std::uintptr_t kMask = (std::uintptr_t{1} << kShadowPageBits) - 1;
  Shadow* page = &global_shadow(a) - (a & kMask);  // an access spans two pages at most
  const std::uintptr_t page_number = a >> kShadowPageBits;
  check_race(
      [&](std::uintptr_t byte) -> Shadow& {
        return (byte >> kShadowPageBits) == page_number ? page[byte & kMask] : global_shadow(byte);
      },
      a, bytes, access);
  count(a, bytes, access, in->index);
  return true;
}

template <class ShadowOf>
void Recorder::check_race(ShadowOf shadow_of, std::uintptr_t address, int bytes, Access access) {
  const std::int32_t threads = coord_.num_threads;
  const std::int32_t block = thread_id_ / threads;
  for (int k = 0; k < bytes; ++k) {
    Shadow& s = shadow_of(address + static_cast<std::uintptr_t>(k));
    const bool write_race = s.writer >= 0 && !ordered_before(s.writer, s.writer_phase);
    const bool read_race =
        access == Access::store &&
        (s.reader == -2 ? !(s.reader_block == block && s.reader_phase < phase_)
                        : s.reader >= 0 && !ordered_before(s.reader, s.reader_phase));
    if (write_race || read_race) {
      const std::int32_t other = write_race ? s.writer : s.reader;
      const std::string who = other < 0 ? std::string("several other threads read")
                              : "thread " + std::to_string(other % threads) + " of block " +
                                    std::to_string(other / threads) + (write_race ? " wrote" : " read");
      report(std::string("race: ") + access_name(access) + " of a byte that " + who +
                 " in the same launch" + (phase_ > 0 ? ", with no barrier between" : ""),
             reinterpret_cast<const void*>(address), bytes);
      return;  // one finding per access
    }
    if (access == Access::store) {
      s.writer = thread_id_, s.writer_phase = phase_;
    } else if (s.reader == -1 || ordered_before(s.reader, s.reader_phase) ||
               (s.reader == -2 && s.reader_block == block && s.reader_phase < phase_)) {
      s.reader = thread_id_, s.reader_phase = phase_, s.reader_block = block;  // replaces ordered reads
    } else {
      s.reader_block = s.reader_block == block ? block : -2;
      s.reader = -2, s.reader_phase = std::max(s.reader_phase, phase_);
    }
  }
}

void Recorder::count(std::uintptr_t address, int bytes, Access access, bool index) {
  ++accesses_;
  requested_ += bytes;
  block_accessed_ = true;
  if (access == Access::store) {  // a store needs what was loaded before it: the batch ends
    batch_open_ = false;
    stored_bytes_ += bytes;
  } else if (index) {  // its value is an address to come: a round trip of its own
    batch_open_ = false;
    ++thread_trips_.index;
  } else {
    if (!batch_open_) batch_open_ = true, ++thread_trips_.data, ++load_batches_;
    loaded_bytes_ += bytes;
  }
  const std::uintptr_t end = address + static_cast<std::uintptr_t>(bytes);
  warp_accesses_[WarpKey{coord_.block, coord_.thread / kWarp, phase_, sequence_++}].ranges.emplace_back(address, end);
  auto& sectors = access == Access::store ? sectors_written_ : sectors_read_;
  for (std::uintptr_t s = address / kSector; s <= (end - 1) / kSector; ++s)
    if (sectors.insert(s).second) chunks_.insert(s * kSector / kChunk);  // a new sector's chunk
}

namespace {

// Distinct bytes and distinct 32-byte sectors of a set of byte ranges.
std::pair<std::int64_t, std::int64_t> distinct_bytes_and_sectors(
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::int64_t bytes = 0, sectors = 0;
  std::uintptr_t covered = 0, last_sector = ~std::uintptr_t{0};
  for (const auto& [begin, end] : ranges) {
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
  batch_open_ = false;
  phase_trips_.at_least(thread_trips_);
  thread_trips_ = {};
}

void Recorder::end_phase() {
  end_thread();
  block_trips_.add(phase_trips_);
  phase_trips_ = {};
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
  for (const auto& [_, w] : warp_accesses_) {
    const auto [bytes, sectors] = distinct_bytes_and_sectors(w.ranges);
    useful_bytes_ += bytes;
    warp_sector_bytes_ += sectors * static_cast<std::int64_t>(kSector);
  }
  warp_accesses_.clear();
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
  s.dram_bytes = static_cast<std::int64_t>((sectors_read_.size() + sectors_written_.size()) * kSector);
  s.errors = errors_;
  s.blocks_observed = blocks_observed_;
  s.blocks_run = blocks_run_;
  s.round_trips = launch_trips_.data;
  s.index_round_trips = launch_trips_.index;
  s.load_phases = launch_trips_.phases;
  s.load_batches = load_batches_;
  s.loaded_bytes = loaded_bytes_;
  s.stored_bytes = stored_bytes_;
  s.dram_chunks = static_cast<std::int64_t>(chunks_.size());
  std::size_t both = 0;  // sectors read and written
  for (const std::uintptr_t sector : sectors_written_) both += sectors_read_.count(sector);
  s.touched_bytes = static_cast<std::int64_t>((sectors_read_.size() + sectors_written_.size() - both) * kSector);
  return s;
}

}  // namespace mlarope::kernels::gpu_model
