// SPDX-License-Identifier: Apache-2.0
// What the bad-input suite (bad_input_test.cpp) and the garbage-metadata suite
// (garbage_metadata_test.cpp) share: every buffer of a call lives in one guarded byte arena, so
// a test can snapshot all of memory, run a call on any backend and compare every byte afterwards
// (inputs, outputs, gaps, guards and the status word).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define MLAROPE_BAD_INPUT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MLAROPE_BAD_INPUT_ASAN 1
#endif
#endif
#if defined(MLAROPE_BAD_INPUT_ASAN)
#include <sanitizer/asan_interface.h>
#endif

#include "backends/case_run.h"
#include "host_convert.h"
#include "mlarope/backend.h"
#include "mlarope/error.h"
#include "mlarope/megatron.h"
#include "mlarope/ops.h"
#include "mlarope/validate.h"
#include "reference.h"
#include "test_util.h"

namespace mlarope::bad_input {

/// Byte filling every buffer before a call (outputs, gaps and guards keep it).
inline constexpr unsigned char kFill = 0xA5;

/// One byte arena holding every buffer of a call, each 64-byte aligned and followed by a guard
/// at least as large as itself; a tail guard absorbs views that a test moved or widened.
class Arena {
 public:
  struct Region {
    std::string name;
    std::size_t offset = 0, bytes = 0;
  };

  /// Reserve `bytes` bytes; returns the region's index.
  std::size_t add(const std::string& name, std::size_t bytes) {
    cursor_ = (cursor_ + 63) / 64 * 64;
    regions_.push_back({name, cursor_, bytes});
    cursor_ += bytes + std::max<std::size_t>(64, bytes);
    largest_ = std::max(largest_, bytes);
    return regions_.size() - 1;
  }
  /// Allocate the storage (every byte kFill); call once, after the last add().
  void finish() {
    size_ = cursor_ + 2 * largest_ + 256;
    storage_.assign(size_ + 64, kFill);
    const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
    base_ = storage_.data() + ((64 - address % 64) % 64);
  }
  unsigned char* base() { return base_; }
  const unsigned char* base() const { return base_; }
  std::size_t size() const { return size_; }
  unsigned char* at(std::size_t region) { return base_ + regions_[region].offset; }
  const Region& region(std::size_t i) const { return regions_[i]; }

  /// Under AddressSanitizer: make every byte outside the buffers unaddressable (until
  /// unpoison()), so that a call reading or writing a guard is reported, not just detected.
  void poison_guards() const {
#if defined(MLAROPE_BAD_INPUT_ASAN)
    std::size_t from = 0;
    for (const Region& r : regions_) {
      if (r.offset > from) ASAN_POISON_MEMORY_REGION(base_ + from, r.offset - from);
      from = (r.offset + r.bytes + 7) / 8 * 8;
    }
    if (size_ > from) ASAN_POISON_MEMORY_REGION(base_ + from, size_ - from);
#endif
  }
  void unpoison() const {
#if defined(MLAROPE_BAD_INPUT_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(base_, size_);
#endif
  }
  /// Guards poisoned for the lifetime of the object.
  struct Poisoned {
    const Arena& arena;
    explicit Poisoned(const Arena& a) : arena(a) { arena.poison_guards(); }
    ~Poisoned() { arena.unpoison(); }
    Poisoned(const Poisoned&) = delete;
    Poisoned& operator=(const Poisoned&) = delete;
  };

  std::vector<unsigned char> snapshot() const { return {base_, base_ + size_}; }
  void restore(const std::vector<unsigned char>& s) { std::memcpy(base_, s.data(), size_); }

  /// Where byte `offset` lies: "t + 12" or "guard after t + 3".
  std::string where(std::size_t offset) const {
    for (std::size_t i = regions_.size(); i-- > 0;) {
      const Region& r = regions_[i];
      if (offset < r.offset) continue;
      std::ostringstream s;
      if (offset < r.offset + r.bytes) s << r.name << " + " << offset - r.offset;
      else s << "guard after " << r.name << " + " << offset - r.offset - r.bytes;
      return s.str();
    }
    return "guard before the first buffer";
  }

  /// gtest assertion: `now` equals `expected` byte for byte (bytes with mask[i] set skipped).
  ::testing::AssertionResult same_bytes(const std::vector<unsigned char>& now,
                                        const std::vector<unsigned char>& expected,
                                        const std::vector<bool>* mask = nullptr) const {
    std::size_t count = 0;
    std::ostringstream s;
    for (std::size_t i = 0; i < size_; ++i) {
      if (mask && (*mask)[i]) continue;
      if (now[i] == expected[i]) continue;
      if (++count <= 4)
        s << " [" << where(i) << ": 0x" << std::hex << int(now[i]) << ", expected 0x"
          << int(expected[i]) << std::dec << "]";
    }
    if (count == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << count << " bytes differ:" << s.str();
  }

 private:
  std::vector<Region> regions_;
  std::size_t cursor_ = 64, largest_ = 0, size_ = 0;
  std::vector<unsigned char> storage_;
  unsigned char* base_ = nullptr;
};

/// Bytes that view `v` spans element by element, marked in `mask` (offsets from `base`).
template <class Void>
void mark_view(std::vector<bool>& mask, const unsigned char* base, const BasicTensorView<Void>& v) {
  if (v.numel() == 0 || v.data == nullptr) return;
  const std::size_t size = dtype_size(v.dtype);
  std::array<std::int64_t, kMaxRank> index{};
  while (true) {
    std::int64_t off = 0;
    for (int d = 0; d < v.rank; ++d) off += index[d] * v.strides[d];
    const auto* p =
        static_cast<const unsigned char*>(v.data) + off * static_cast<std::int64_t>(size);
    for (std::size_t k = 0; k < size; ++k) mask[static_cast<std::size_t>(p - base) + k] = true;
    int d = v.rank - 1;
    for (; d >= 0; --d) {
      if (++index[d] < v.shape[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

/// Element at `index` of a view, as a double.
template <class Void>
double element(const BasicTensorView<Void>& v, std::initializer_list<std::int64_t> index) {
  return load_as_double(v.data, v.dtype, v.offset(index));
}
template <class Void>
std::uint32_t element_bits(const BasicTensorView<Void>& v,
                           std::initializer_list<std::int64_t> index) {
  const auto* p = static_cast<const unsigned char*>(v.data) +
                  v.offset(index) * static_cast<std::int64_t>(dtype_size(v.dtype));
  if (dtype_size(v.dtype) == 4) {
    std::uint32_t b;
    std::memcpy(&b, p, 4);
    return b;
  }
  std::uint16_t b;
  std::memcpy(&b, p, 2);
  return b;
}

// --- Calls ---------------------------------------------------------------------------------------

/// The library's entry points (include/mlarope/backend.h): an Op (mlarope/types.h) in one of
/// its forms, since each form validates its own arguments.
enum class EntryPoint {
  rope,
  rope_inplace,
  rope_backward,
  rope_backward_inplace,
  kv_split,
  kv_split_backward
};

inline const std::vector<EntryPoint>& all_entry_points() {
  static const std::vector<EntryPoint> ops = {
      EntryPoint::rope,          EntryPoint::rope_inplace,
      EntryPoint::rope_backward, EntryPoint::rope_backward_inplace,
      EntryPoint::kv_split,      EntryPoint::kv_split_backward};
  return ops;
}

inline const char* entry_point_name(EntryPoint op) {
  switch (op) {
    case EntryPoint::rope: return "rope";
    case EntryPoint::rope_inplace: return "rope_inplace";
    case EntryPoint::rope_backward: return "rope_backward";
    case EntryPoint::rope_backward_inplace: return "rope_backward_inplace";
    case EntryPoint::kv_split: return "kv_split";
    case EntryPoint::kv_split_backward: return "kv_split_backward";
  }
  return "?";
}

inline bool is_kv(EntryPoint op) {
  return op == EntryPoint::kv_split || op == EntryPoint::kv_split_backward;
}
inline bool is_inplace(EntryPoint op) {
  return op == EntryPoint::rope_inplace || op == EntryPoint::rope_backward_inplace;
}

/// Everything that describes one call to build: shapes, dims, dtypes, metadata.
struct Spec {
  EntryPoint op = EntryPoint::rope;
  TokenLayout layout = TokenLayout::sbhd;
  std::int64_t S = 4, B = 2, T = 6, H = 3;
  std::int64_t nope = 2, emb = 4, k = 3, v = 5;
  DType act = DType::bf16, table_dtype = DType::f32;
  std::int64_t table_rows = 8;
  std::int64_t pad = 0;  ///< extra elements per head and per row: gaps inside every view
  std::int64_t cp_size = 1, cp_rank = 0;
  FreqMode freq_mode = FreqMode::per_sequence;
  std::int64_t max_seqlen = 0;
  std::vector<std::int64_t> cu{0, 2, 6};
  bool with_cu = true;
  std::vector<std::int64_t> position_ids;  ///< given when has_position_ids
  bool has_position_ids = false;
  IndexType position_ids_type = IndexType::i32;
  std::vector<std::int64_t> seq_offsets;
  bool has_seq_offsets = false;
  LayoutTriple layouts{};
  bool inverse = false;
  DeviceStatus initial_status = kStatusOk;
  std::uint64_t seed = 1;
};

/// The call of a Spec, built in its own Arena; tests mutate the views and args freely.
struct Built {
  Built() = default;
  Built(const Built&) = delete;
  Built& operator=(const Built&) = delete;

  Spec spec;
  Arena arena;
  std::size_t status_region = 0;
  // The rope family: `in` (t / grad_out) and `out` (out / grad_t); in place: `io` (t / grad).
  ConstTensorView in;
  TensorView out, io;
  // kv_split: kv, k_pe -> key, value. kv_split_backward: grad_key, grad_value -> grad_kv,
  // grad_k_pe.
  ConstTensorView in0, in1;
  TensorView out0, out1;
  RopeArgs rope_args;
  KvSplitArgs kv_args;

  Rotation& rotation() { return is_kv(spec.op) ? kv_args.rotation : rope_args.rotation; }
  Positions& positions() { return is_kv(spec.op) ? kv_args.positions : rope_args.positions; }
  DeviceStatus*& status() { return is_kv(spec.op) ? kv_args.status : rope_args.status; }
  std::int64_t& emb_dim() { return is_kv(spec.op) ? kv_args.emb_dim : rope_args.emb_dim; }
  DeviceStatus status_word() { return *reinterpret_cast<DeviceStatus*>(arena.at(status_region)); }
  std::int64_t rows() const { return spec.layout == TokenLayout::sbhd ? spec.S : spec.T; }
  RowShape row_shape() const {
    return spec.layout == TokenLayout::sbhd ? RowShape{spec.S, spec.B} : RowShape{spec.T, 1};
  }

  /// One view of the call, by name, for the rules that apply to every view.
  struct Named {
    std::string name;
    bool output;  ///< written by the call (outputs and the tensor of an in-place call)
    ConstTensorView* cview = nullptr;
    TensorView* view = nullptr;
    std::array<std::int64_t, kMaxRank>& strides() { return view ? view->strides : cview->strides; }
    std::array<std::int64_t, kMaxRank>& shape() { return view ? view->shape : cview->shape; }
    int rank() const { return view ? view->rank : cview->rank; }
    DType& dtype() { return view ? view->dtype : cview->dtype; }
    const void* data() const { return view ? view->data : cview->data; }
    void set_data(const void* p) {
      if (view) view->data = const_cast<void*>(p);
      else cview->data = p;
    }
    std::int64_t numel() const { return view ? view->numel() : cview->numel(); }
  };
  /// The activation views, inputs first for out-of-place calls: names as validate() spells them.
  std::vector<Named> activations() {
    switch (spec.op) {
      case EntryPoint::rope: return {{"t", false, &in, nullptr}, {"out", true, nullptr, &out}};
      case EntryPoint::rope_backward:
        return {{"grad_out", false, &in, nullptr}, {"grad_t", true, nullptr, &out}};
      case EntryPoint::rope_inplace: return {{"t", true, nullptr, &io}};
      case EntryPoint::rope_backward_inplace: return {{"grad", true, nullptr, &io}};
      case EntryPoint::kv_split:
        return {{"kv", false, &in0, nullptr},
                {"k_pe", false, &in1, nullptr},
                {"key", true, nullptr, &out0},
                {"value", true, nullptr, &out1}};
      case EntryPoint::kv_split_backward:
        return {{"grad_key", false, &in0, nullptr},
                {"grad_value", false, &in1, nullptr},
                {"grad_kv", true, nullptr, &out0},
                {"grad_k_pe", true, nullptr, &out1}};
    }
    return {};
  }
  /// Activations plus the tables.
  std::vector<Named> all_views() {
    std::vector<Named> v = activations();
    v.push_back({"cos", false, &rotation().cos, nullptr});
    v.push_back({"sin", false, &rotation().sin, nullptr});
    return v;
  }
  /// Mask of the bytes the call may write: output view elements and the status word.
  std::vector<bool> writable_mask() {
    std::vector<bool> mask(arena.size(), false);
    for (Named& n : activations())
      if (n.output) {
        if (n.view) mark_view(mask, arena.base(), *n.view);
      }
    const Arena::Region& r = arena.region(status_region);
    for (std::size_t i = 0; i < sizeof(DeviceStatus); ++i) mask[r.offset + i] = true;
    return mask;
  }
};

namespace detail {

// A view of `shape` at `data`, C order, with `pad` spare elements added to the head stride and
// to the stride above it (gaps inside the view).
template <class Void>
BasicTensorView<Void> make_view(Void* data, DType dtype, const std::vector<std::int64_t>& shape,
                                std::int64_t pad) {
  BasicTensorView<Void> v;
  v.data = data;
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  std::int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.shape[d] = shape[d];
    v.strides[d] = stride;
    // Pad the head stride (d = rank - 2) and the row stride (d = rank - 3).
    stride = stride * std::max<std::int64_t>(shape[d], 1) + (d >= 1 && d + 2 >= v.rank ? pad : 0);
  }
  return v;
}

// Bytes a view made by make_view spans (at least one element).
inline std::size_t view_bytes(DType dtype, const std::vector<std::int64_t>& shape,
                              std::int64_t pad) {
  const ConstTensorView v = make_view<const void>(nullptr, dtype, shape, pad);
  std::int64_t span = 1;
  for (int d = 0; d < v.rank; ++d)
    span += (std::max<std::int64_t>(v.shape[d], 1) - 1) * v.strides[d];
  return static_cast<std::size_t>(span) * dtype_size(dtype);
}

// Small non-zero integers: every rotation by +-1 table entries, and every head sum, is exact.
inline void fill_integers(const TensorView& v, test::Rng& rng) {
  if (v.numel() == 0 || v.data == nullptr) return;
  std::array<std::int64_t, kMaxRank> index{};
  while (true) {
    std::int64_t off = 0;
    for (int d = 0; d < v.rank; ++d) off += index[d] * v.strides[d];
    const double x = static_cast<double>(1 + rng.next() % 8) * ((rng.next() & 1) ? -1 : 1);
    store_rounded(v.data, v.dtype, off, x);
    int d = v.rank - 1;
    for (; d >= 0; --d) {
      if (++index[d] < v.shape[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

inline IndexView index_array(Arena& arena, std::size_t region,
                             const std::vector<std::int64_t>& values, IndexType type) {
  unsigned char* p = arena.at(region);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (type == IndexType::i32) {
      const auto x = static_cast<std::int32_t>(values[i]);
      std::memcpy(p + 4 * i, &x, 4);
    } else {
      std::memcpy(p + 8 * i, &values[i], 8);
    }
  }
  return {p, type, static_cast<std::int64_t>(values.size())};
}

}  // namespace detail

/// Build the call of `spec`: activations of small integers, tables of +-1 entries (so every
/// backend's result is exact and must equal the reference's bit for bit), outputs kFill.
inline void build(Built& b, const Spec& spec) {
  b.spec = spec;
  const Spec& s = spec;
  auto shape = [&](std::int64_t heads, std::int64_t width) {
    return s.layout == TokenLayout::sbhd ? std::vector<std::int64_t>{s.S, s.B, heads, width}
                                         : std::vector<std::int64_t>{s.T, heads, width};
  };
  const bool kv = is_kv(s.op);
  // Shapes, outputs first (a moved output then overlaps the input it was moved to first).
  struct Item {
    const char* name;
    std::vector<std::int64_t> shape;
    bool output;
  };
  std::vector<Item> items;
  const std::int64_t width = s.nope + s.emb;
  switch (s.op) {
    case EntryPoint::rope:
      items = {{"out", shape(s.H, width), true}, {"t", shape(s.H, width), false}};
      break;
    case EntryPoint::rope_backward:
      items = {{"grad_t", shape(s.H, width), true}, {"grad_out", shape(s.H, width), false}};
      break;
    case EntryPoint::rope_inplace: items = {{"t", shape(s.H, width), true}}; break;
    case EntryPoint::rope_backward_inplace: items = {{"grad", shape(s.H, width), true}}; break;
    case EntryPoint::kv_split:
      items = {{"key", shape(s.H, s.k + s.emb), true},
               {"value", shape(s.H, s.v), true},
               {"kv", shape(s.H, s.k + s.v), false},
               {"k_pe", shape(1, s.emb), false}};
      break;
    case EntryPoint::kv_split_backward:
      items = {{"grad_kv", shape(s.H, s.k + s.v), true},
               {"grad_k_pe", shape(1, s.emb), true},
               {"grad_key", shape(s.H, s.k + s.emb), false},
               {"grad_value", shape(s.H, s.v), false}};
      break;
  }
  std::vector<std::size_t> regions;
  regions.reserve(items.size());
  for (const Item& it : items)
    regions.push_back(b.arena.add(it.name, detail::view_bytes(s.act, it.shape, s.pad)));
  const std::vector<std::int64_t> table_shape{s.table_rows, s.emb};
  const std::size_t cos_region =
      b.arena.add("cos", detail::view_bytes(s.table_dtype, table_shape, 0));
  const std::size_t sin_region =
      b.arena.add("sin", detail::view_bytes(s.table_dtype, table_shape, 0));
  const std::size_t cu_region =
      b.arena.add("cu_seqlens", 4 * std::max<std::size_t>(s.cu.size(), 1));
  const std::size_t pos_region =
      b.arena.add("position_ids", index_size(s.position_ids_type) *
                                      std::max<std::size_t>(s.position_ids.size(), 1));
  const std::size_t off_region =
      b.arena.add("seq_offsets", 4 * std::max<std::size_t>(s.seq_offsets.size(), 1));
  b.status_region = b.arena.add("status", sizeof(DeviceStatus));
  b.arena.finish();

  test::Rng rng(s.seed);
  std::vector<TensorView> views;
  for (std::size_t i = 0; i < items.size(); ++i) {
    views.push_back(detail::make_view<void>(b.arena.at(regions[i]), s.act, items[i].shape, s.pad));
    if (!items[i].output || is_inplace(s.op)) detail::fill_integers(views.back(), rng);
  }
  // Tables: every entry +-1, independently.
  TensorView cos = detail::make_view<void>(b.arena.at(cos_region), s.table_dtype, table_shape, 0);
  TensorView sin = detail::make_view<void>(b.arena.at(sin_region), s.table_dtype, table_shape, 0);
  for (std::int64_t r = 0; r < s.table_rows; ++r)
    for (std::int64_t e = 0; e < s.emb; ++e) {
      store_rounded(cos.data, s.table_dtype, r * s.emb + e, (rng.next() & 1) ? 1.0 : -1.0);
      store_rounded(sin.data, s.table_dtype, r * s.emb + e, (rng.next() & 1) ? 1.0 : -1.0);
    }
  Rotation rotation;
  rotation.in_layout = s.layouts.in_layout;
  rotation.out_layout = s.layouts.out_layout;
  rotation.table_layout = s.layouts.table_layout;
  rotation.inverse = s.inverse;
  rotation.cos = cos;
  rotation.sin = sin;

  Positions p;
  p.layout = s.layout;
  p.cp_size = s.cp_size;
  p.cp_rank = s.cp_rank;
  p.freq_mode = s.freq_mode;
  p.max_seqlen = s.max_seqlen;
  if (s.layout == TokenLayout::thd && s.with_cu)
    p.cu_seqlens = detail::index_array(b.arena, cu_region, s.cu, IndexType::i32);
  if (s.has_position_ids)
    p.position_ids = detail::index_array(b.arena, pos_region, s.position_ids, s.position_ids_type);
  if (s.has_seq_offsets)
    p.seq_offsets = detail::index_array(b.arena, off_region, s.seq_offsets, IndexType::i32);
  auto* status = reinterpret_cast<DeviceStatus*>(b.arena.at(b.status_region));
  *status = s.initial_status;

  if (kv) {
    b.kv_args = test::kv_args(s.k, s.v, s.emb, rotation, p, status);
    b.out0 = views[0];
    b.out1 = views[1];
    b.in0 = views[2];
    b.in1 = views[3];
  } else {
    b.rope_args = test::rope_args(s.nope, s.emb, rotation, p, status);
    if (is_inplace(s.op)) {
      b.io = views[0];
    } else {
      b.out = views[0];
      b.in = views[1];
    }
  }
}

/// Run the call on a backend (host memory in, host memory out), guards poisoned under ASan.
inline void run(const harness::Backend& backend, Built& b) {
  const Arena::Poisoned poisoned(b.arena);
  switch (b.spec.op) {
    case EntryPoint::rope: backend.rope({b.in, b.out, b.rope_args}); break;
    case EntryPoint::rope_inplace: backend.rope_inplace({b.io, b.rope_args}); break;
    case EntryPoint::rope_backward: backend.rope_backward({b.in, b.out, b.rope_args}); break;
    case EntryPoint::rope_backward_inplace:
      backend.rope_backward_inplace({b.io, b.rope_args});
      break;
    case EntryPoint::kv_split: backend.kv_split({b.in0, b.in1, b.out0, b.out1, b.kv_args}); break;
    case EntryPoint::kv_split_backward:
      backend.kv_split_backward({b.in0, b.in1, b.out0, b.out1, b.kv_args});
      break;
  }
}

/// Run `call`, then `finish`, whether `call` returns or throws (a cleanup that can fail, so not
/// a destructor: a destructor that throws during unwinding calls std::terminate). When both
/// throw, the error of `call` is thrown with the error of `finish` appended.
template <class Call, class Finish>
void run_then_finish(Call&& call, Finish&& finish) {
  try {
    call();
  } catch (const std::exception& first) {
    try {
      finish();
    } catch (const std::exception& second) {
      throw Error(std::string(first.what()) + "; then, cleaning up: " + second.what());
    }
    throw;
  }
  finish();
}

/// The backend of a test parameter, or a skip reason when it is not available here.
inline bool backend_available(const std::string& name, std::string* why) {
  if (name == "cuda" && !cuda_device_available()) {
    *why = "no CUDA device here (mlarope::cuda_device_available() is false): the cuda backend is "
           "not tested";
    return false;
  }
  return true;
}

// --- Shared by the bad-input and the garbage-metadata suites ---------------------------------

inline constexpr std::int32_t kI32Max = std::numeric_limits<std::int32_t>::max();
inline constexpr std::int32_t kI32Min = std::numeric_limits<std::int32_t>::min();
inline constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
inline constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();

// --- Running on a backend ----------------------------------------------------------------------

// The CUDA backend gets a device copy of the whole arena (every pointer of the call moved into
// it) and the whole arena back afterwards, so writes outside the views show up on the host too.
// The copy keeps each address modulo 256 (place_copy), so misaligned views stay misaligned.
class DeviceArena {
 public:
  explicit DeviceArena(Arena& arena)
      : arena_(arena), placement_(place_copy(arena.base(), arena.size())),
        buffer_(BackendKind::cuda, placement_.buffer_bytes) {
    buffer_.copy_from_host(arena.base(), arena.size(), placement_.offset);
  }
  template <class P>
  P* move(P* p) const {
    const auto* c = reinterpret_cast<const unsigned char*>(p);
    if (c < arena_.base() || c >= arena_.base() + arena_.size()) return p;
    return reinterpret_cast<P*>(
        const_cast<unsigned char*>(static_cast<const unsigned char*>(buffer_.data()) +
                                   placement_.offset + (c - arena_.base())));
  }
  template <class Void>
  BasicTensorView<Void> move(BasicTensorView<Void> v) const {
    v.data = move(v.data);
    return v;
  }
  template <class Args>
  Args move_args(Args a) const {
    a.rotation.cos = move(a.rotation.cos);
    a.rotation.sin = move(a.rotation.sin);
    a.positions.cu_seqlens.data = move(a.positions.cu_seqlens.data);
    a.positions.position_ids.data = move(a.positions.position_ids.data);
    a.positions.seq_offsets.data = move(a.positions.seq_offsets.data);
    a.status = move(a.status);
    return a;
  }
  void copy_back() { buffer_.copy_to_host(arena_.base(), arena_.size(), placement_.offset); }

 private:
  Arena& arena_;
  CopyPlacement placement_;
  DeviceBuffer buffer_;
};

// One backend under test: "reference", "host" (harness::Backend) or "cuda" (arena mirror).
class Runner {
 public:
  explicit Runner(const std::string& name) : name_(name) {
    if (name == "cuda") {
      stream_ = std::make_shared<Stream>(Stream::cuda());
    } else {
      backend_ = harness::find_backend(name);
      if (name == "host") stream_ = std::make_shared<Stream>(Stream::host());
    }
  }
  const std::string& name() const { return name_; }

  void run(Built& b) const {
    if (name_ != "cuda") return bad_input::run(backend_, b);
    DeviceArena d(b.arena);
    // Copy back whether the call returns or throws: a rejected call must not have written
    // device memory either.
    run_then_finish([&] { run_on_device(d, b); },
                    [&] {
                      stream_->synchronize();
                      d.copy_back();
                    });
  }

  void run_on_device(const DeviceArena& d, Built& b) const {
    switch (b.spec.op) {
      case EntryPoint::rope:
        mlarope::rope({d.move(b.in), d.move(b.out), d.move_args(b.rope_args)}, *stream_);
        break;
      case EntryPoint::rope_inplace:
        mlarope::rope_inplace({d.move(b.io), d.move_args(b.rope_args)}, *stream_);
        break;
      case EntryPoint::rope_backward:
        mlarope::rope_backward({d.move(b.in), d.move(b.out), d.move_args(b.rope_args)}, *stream_);
        break;
      case EntryPoint::rope_backward_inplace:
        mlarope::rope_backward_inplace({d.move(b.io), d.move_args(b.rope_args)}, *stream_);
        break;
      case EntryPoint::kv_split:
        mlarope::kv_split({d.move(b.in0), d.move(b.in1), d.move(b.out0), d.move(b.out1),
                           d.move_args(b.kv_args)},
                          *stream_);
        break;
      case EntryPoint::kv_split_backward:
        mlarope::kv_split_backward({d.move(b.in0), d.move(b.in1), d.move(b.out0), d.move(b.out1),
                                    d.move_args(b.kv_args)},
                                   *stream_);
        break;
    }
  }

  // harness::Backend has no yarn member: the entry points directly.
  void yarn(YarnTablesCall call, Arena& arena) const {
    if (name_ != "cuda") {
      const Arena::Poisoned poisoned(arena);
      if (name_ == "reference") return reference::yarn_tables(call);
      mlarope::yarn_tables(call, *stream_);
      stream_->synchronize();
      return;
    }
    DeviceArena d(arena);
    call.cos = d.move(call.cos);
    call.sin = d.move(call.sin);
    run_then_finish([&] { mlarope::yarn_tables(call, *stream_); },
                    [&] {
                      stream_->synchronize();
                      d.copy_back();
                    });
  }

 private:
  std::string name_;
  harness::Backend backend_;
  std::shared_ptr<Stream> stream_;
};

class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!backend_available(GetParam(), &why)) GTEST_SKIP() << why;
    runner_ = std::make_unique<Runner>(GetParam());
  }
  const Runner& runner() const { return *runner_; }

 private:
  std::unique_ptr<Runner> runner_;
};

/// An edit of a call's description before it is built.
using SpecEdit = std::function<void(Spec&)>;

inline const char* layout_name(TokenLayout l) { return l == TokenLayout::sbhd ? "sbhd" : "thd"; }

inline std::string trace(const Spec& s) {
  return std::string(entry_point_name(s.op)) + " " + layout_name(s.layout) + " seed " +
         std::to_string(s.seed);
}

// --- Accepted calls ----------------------------------------------------------------------------

// Run the reference and the backend from the same memory: the backend's memory afterwards must
// equal the reference's byte for byte, and the reference writes only output elements and the
// status word. Returns the backend's status word.
inline DeviceStatus expect_matches_reference(const Runner& runner, Built& b) {
  static const harness::Backend reference = harness::reference_backend();
  const std::vector<unsigned char> initial = b.arena.snapshot();
  const std::vector<bool> mask = b.writable_mask();
  try {
    run(reference, b);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the reference rejected a valid call: " << e.what();
    return b.status_word();
  }
  const std::vector<unsigned char> expected = b.arena.snapshot();
  EXPECT_TRUE(b.arena.same_bytes(expected, initial, &mask))
      << "the reference wrote outside the outputs";
  b.arena.restore(initial);
  try {
    runner.run(b);
  } catch (const std::exception& e) {
    ADD_FAILURE() << runner.name() << " rejected a valid call: " << e.what();
  }
  EXPECT_TRUE(b.arena.same_bytes(b.arena.snapshot(), expected))
      << runner.name() << " differs from the reference";
  return b.status_word();
}

inline std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

}  // namespace mlarope::bad_input
