// SPDX-License-Identifier: Apache-2.0
// docs/semantics.md §5: host-known rules, checked before anything is launched, and the
// device-metadata rules applied to host copies. Every message names the argument, its value, what
// was expected.
#include "mlarope/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "mlarope/error.h"

namespace mlarope {
namespace {

bool valid_dtype(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// a * b + c when it stays within [0, kMaxViewBytes]; -1 otherwise (a, b, c >= 0).
std::int64_t bounded_multiply_add(std::int64_t a, std::int64_t b, std::int64_t c) {
  const __int128 r = static_cast<__int128>(a) * b + c;
  return r > kMaxViewBytes ? -1 : static_cast<std::int64_t>(r);
}

// The name of dimension i of a rank-`rank` activation view ([S, B, H, D] or [T, H, D]) or
// table ([R, D] or [R, 1, 1, D]), for messages.
std::string dim_label(const ConstTensorView& v, int i) {
  const char* const sbhd[] = {"S", "B", "heads", "last dim"};
  const char* const thd[] = {"T", "heads", "last dim"};
  const char* const table[] = {"rows", "last dim"};
  const char* label = v.rank == 4   ? sbhd[i]
                      : v.rank == 3 ? thd[i]
                      : v.rank == 2 ? table[i]
                                    : nullptr;
  return label != nullptr ? std::string(label) + " (dim " + std::to_string(i) + ")"
                          : "dim " + std::to_string(i);
}

// docs/semantics.md §5: element count and byte extent within 2^62, so index arithmetic cannot
// overflow. Each dimension and stride is bounded first, naming the one that is too large.
void check_view_size(const ConstTensorView& v, const char* name) {
  for (int i = 0; i < v.rank; ++i)
    if (v.shape[i] == 0) return;  // no element, however large the other dimensions
  for (int i = 0; i < v.rank; ++i)
    if (v.shape[i] > kMaxDim)
      throw Error(std::string(name) + ": " + dim_label(v, i) + " = " + std::to_string(v.shape[i]) +
                  " in shape " + shape_string(v.shape.data(), v.rank) +
                  ", more than 2^61 (the largest size, docs/semantics.md §5)");
  for (int i = 0; i < v.rank; ++i)
    if (v.strides[i] > kMaxViewBytes || v.strides[i] < -kMaxViewBytes)
      throw Error(std::string(name) + ": stride " + std::to_string(v.strides[i]) + " of " +
                  dim_label(v, i) + " (strides " + shape_string(v.strides.data(), v.rank) +
                  ") is beyond 2^62 elements");
  std::int64_t count = 1, span = 0;
  for (int i = 0; i < v.rank && count >= 0; ++i) count = bounded_multiply_add(count, v.shape[i], 0);
  if (count < 0)
    throw Error(std::string(name) + ": shape " + shape_string(v.shape.data(), v.rank) +
                " has more than 2^62 elements");
  for (int i = 0; i < v.rank && span >= 0; ++i)
    span = bounded_multiply_add(v.shape[i] - 1, std::llabs(v.strides[i]), span);
  const std::int64_t size = static_cast<std::int64_t>(dtype_size(v.dtype));
  if (span < 0 || bounded_multiply_add(span + 1, size, 0) < 0)
    throw Error(std::string(name) + ": shape " + shape_string(v.shape.data(), v.rank) +
                " with strides " + shape_string(v.strides.data(), v.rank) +
                " spans more than 2^62 bytes");
}

// docs/semantics.md §5: a pointer that is accessed is aligned to its element size (a GPU traps
// otherwise).
void check_aligned(const void* data, std::size_t element_bytes, const char* name,
                   const char* type) {
  const auto address = reinterpret_cast<std::uintptr_t>(data);
  if (address % element_bytes == 0) return;
  std::ostringstream s;
  s << name << ": data pointer 0x" << std::hex << address << std::dec
    << " is not aligned to its element size (" << element_bytes << " bytes, " << type << ")";
  throw Error(s.str());
}

// Rank, dtype, sizes, last-dim stride, null data and alignment of one view.
void check_view(const ConstTensorView& v, const char* name, int rank) {
  if (v.rank != rank)
    throw Error(std::string(name) + ": rank " + std::to_string(v.rank) + ", expected " +
                std::to_string(rank) + " (shape " + shape_string(v.shape.data(), v.rank) + ")");
  if (!valid_dtype(v.dtype)) throw Error(std::string(name) + ": unknown dtype");
  for (int i = 0; i < rank; ++i)
    if (v.shape[i] < 0)
      throw Error(std::string(name) + ": negative size in shape " +
                  shape_string(v.shape.data(), v.rank));
  check_view_size(v, name);
  if (v.numel() > 0 && v.data != nullptr)
    check_aligned(v.data, dtype_size(v.dtype), name, std::string(to_string(v.dtype)).c_str());
  if (v.numel() > 0 && v.data == nullptr)
    throw Error(std::string(name) + ": null data with shape " +
                shape_string(v.shape.data(), v.rank));
  if (rank > 0 && v.size(-1) > 1 && v.stride(-1) != 1)
    throw Error(std::string(name) + ": last-dim stride " + std::to_string(v.stride(-1)) +
                ", expected 1");
}

void check_last_dim(const ConstTensorView& v, const char* name, std::int64_t expected,
                    const std::string& formula) {
  if (v.size(-1) != expected)
    throw Error(std::string(name) + ": last dim " + std::to_string(v.size(-1)) + ", expected " +
                formula + " = " + std::to_string(expected));
}

void check_same_dims(const ConstTensorView& a, const char* a_name, const ConstTensorView& b,
                     const char* b_name, int count) {
  for (int i = 0; i < count; ++i)
    if (a.shape[i] != b.shape[i])
      throw Error(std::string(b_name) + ": shape " + shape_string(b.shape.data(), b.rank) +
                  " does not match " + a_name + " shape " + shape_string(a.shape.data(), a.rank) +
                  " in dim " + std::to_string(i));
}

void check_same_dtype(const ConstTensorView& a, const char* a_name, const ConstTensorView& b,
                      const char* b_name) {
  if (a.dtype != b.dtype)
    throw Error(std::string(b_name) + ": dtype " + std::string(to_string(b.dtype)) + ", expected " +
                std::string(to_string(a.dtype)) + " (the dtype of " + a_name + ")");
}

// Byte range [first, last) that a view can touch; empty for zero-size views.
struct Extent {
  const char* first = nullptr;
  const char* last = nullptr;
  bool empty() const { return first == last; }
};

Extent extent_of(const ConstTensorView& v) {
  if (v.numel() == 0 || v.data == nullptr) return {};
  std::int64_t low = 0, high = 0;
  for (int i = 0; i < v.rank; ++i) {
    const std::int64_t span = (v.shape[i] - 1) * v.strides[i];
    (span < 0 ? low : high) += span;
  }
  const auto size = static_cast<std::int64_t>(dtype_size(v.dtype));
  const char* base = static_cast<const char*>(v.data);
  return {base + low * size, base + (high + 1) * size};
}

Extent extent_of(const IndexView& v) {
  if (!v.present() || v.size <= 0) return {};
  const char* base = static_cast<const char*>(v.data);
  return {base, base + v.size * static_cast<std::int64_t>(index_size(v.type))};
}

bool overlaps(Extent a, Extent b) {
  return !a.empty() && !b.empty() && a.first < b.last && b.first < a.last;
}

// An output's elements must not alias each other: strides sorted by size must nest.
void check_no_self_overlap(const ConstTensorView& v, const char* name) {
  if (v.numel() <= 1) return;
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (|stride|, size)
  for (int i = 0; i < v.rank; ++i)
    if (v.shape[i] > 1) dims.push_back({std::llabs(v.strides[i]), v.shape[i]});
  std::sort(dims.begin(), dims.end());
  std::int64_t inner_extent = 1;
  for (auto [stride, size] : dims) {
    if (stride < inner_extent)
      throw Error(std::string(name) + ": strides make elements overlap (shape " +
                  shape_string(v.shape.data(), v.rank) +
                  "); an output needs one element per index");
    inner_extent = stride * (size - 1) + inner_extent;
  }
}

struct NamedExtent {
  const char* name;
  Extent extent;
};

void check_output_disjoint(const ConstTensorView& out, const char* name,
                           const std::vector<NamedExtent>& others) {
  const Extent e = extent_of(out);
  for (const NamedExtent& other : others)
    if (overlaps(e, other.extent))
      throw Error(std::string(name) + ": memory overlaps " + other.name +
                  "; outputs of out-of-place calls must not overlap any input or other output");
}

std::vector<NamedExtent> metadata_extents(const Positions& p) {
  return {{"cu_seqlens", extent_of(p.cu_seqlens)},
          {"position_ids", extent_of(p.position_ids)},
          {"seq_offsets", extent_of(p.seq_offsets)}};
}

std::vector<NamedExtent> rotation_extents(const Rotation& r) {
  return {{"cos", extent_of(r.cos)}, {"sin", extent_of(r.sin)}};
}

std::vector<NamedExtent> concat(std::vector<NamedExtent> a, const std::vector<NamedExtent>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void check_table(const ConstTensorView& table, const char* name, std::int64_t emb_dim) {
  if (table.rank != 2 && table.rank != 4)
    throw Error(std::string(name) + ": rank " + std::to_string(table.rank) +
                ", expected [R, emb_dim] or [R, 1, 1, emb_dim]");
  check_view(table, name, table.rank);
  if (table.rank == 4 && (table.shape[1] != 1 || table.shape[2] != 1))
    throw Error(std::string(name) + ": shape " + shape_string(table.shape.data(), table.rank) +
                ", expected [R, 1, 1, emb_dim]");
  check_last_dim(table, name, emb_dim, "emb_dim");
}

void check_rotation(const Rotation& r, std::int64_t emb_dim) {
  if (emb_dim < 2 || emb_dim % 2 != 0)
    throw Error("emb_dim = " + std::to_string(emb_dim) + ": expected an even number >= 2");
  check_dim(emb_dim, "emb_dim");
  check_table(r.cos, "cos", emb_dim);
  check_table(r.sin, "sin", emb_dim);
  check_same_dims(r.cos, "cos", r.sin, "sin", r.cos.rank);
  if (r.sin.rank != r.cos.rank) throw Error("sin: rank differs from cos");
  check_same_dtype(r.cos, "cos", r.sin, "sin");
}

void check_index_array(const IndexView& v, const char* name, std::int64_t expected_size,
                       bool allow_i64) {
  if (!v.present()) return;
  if (v.type != IndexType::i32 && !(allow_i64 && v.type == IndexType::i64))
    throw Error(std::string(name) + ": index type " + std::string(to_string(v.type)) +
                ", expected " + (allow_i64 ? "i32 or i64" : "i32"));
  if (v.size != expected_size)
    throw Error(std::string(name) + ": " + std::to_string(v.size) + " entries, expected " +
                std::to_string(expected_size));
  if (v.size > 0)
    check_aligned(v.data, index_size(v.type), name, std::string(to_string(v.type)).c_str());
}

void check_status_word(const DeviceStatus* status) {
  if (status != nullptr)
    check_aligned(status, sizeof(DeviceStatus), "status", "uint32 status word");
}

// Highest table row the host can know a call uses, or -1 when it cannot know.
std::int64_t host_known_last_row(const Positions& p, RowShape rows) {
  if (p.seq_offsets.present()) return -1;
  if (p.layout == TokenLayout::sbhd) {
    const std::int64_t s = rows.seq;
    if (s == 0 || rows.batch == 0) return -1;
    if (p.cp_size == 1) return s - 1;
    // cp_pos of the last local row; s <= 2^62 and cp_size <= 2^20: computed in 128 bits.
    const __int128 last =
        static_cast<__int128>(s) * p.cp_size - static_cast<__int128>(p.cp_rank) * (s / 2) - 1;
    return last > INT64_MAX ? INT64_MAX : static_cast<std::int64_t>(last);
  }
  if (p.position_ids.present() || p.freq_mode == FreqMode::packed || p.max_seqlen <= 0) return -1;
  return rows.seq == 0 ? -1 : p.max_seqlen - 1;
}

// The rules on positions that do not depend on the tensors. A call that writes nothing looks
// up no table row, so the table need not cover its rows.
void check_positions(const Positions& p, RowShape rows, std::int64_t table_row_count,
                     bool writes_nothing) {
  if (p.layout != TokenLayout::sbhd && p.layout != TokenLayout::thd)
    throw Error("layout: unknown value");
  if (p.cp_size < 1) throw Error("cp_size = " + std::to_string(p.cp_size) + ": expected >= 1");
  if (p.cp_size > kMaxCpSize)
    throw Error("cp_size = " + std::to_string(p.cp_size) + ": expected <= 2^20 (" +
                std::to_string(kMaxCpSize) + ")");
  if (p.cp_rank < 0 || p.cp_rank >= p.cp_size)
    throw Error("cp_rank = " + std::to_string(p.cp_rank) +
                ": expected 0 <= cp_rank < cp_size = " + std::to_string(p.cp_size));
  if (p.freq_mode != FreqMode::per_sequence && p.freq_mode != FreqMode::packed)
    throw Error("freq_mode: unknown value");
  if (p.max_seqlen < 0)
    throw Error("max_seqlen = " + std::to_string(p.max_seqlen) + ": expected >= 0");
  if (p.layout == TokenLayout::sbhd) {
    if (p.cu_seqlens.present()) throw Error("cu_seqlens: given for an SBHD call; it is THD only");
    if (p.position_ids.present())
      throw Error("position_ids: given for an SBHD call; it is THD only");
    if (p.freq_mode == FreqMode::packed)
      throw Error("freq_mode = packed: given for an SBHD call; it is THD only");
    if (p.cp_size > 1 && rows.seq % 2 != 0)
      throw Error("S = " + std::to_string(rows.seq) + ": SBHD with cp_size = " +
                  std::to_string(p.cp_size) + " needs an even sequence length");
    check_index_array(p.seq_offsets, "seq_offsets", rows.batch, false);
  } else {
    if (!p.cu_seqlens.present()) throw Error("cu_seqlens: missing; THD calls need it");
    if (p.cu_seqlens.size < 1)
      throw Error("cu_seqlens: " + std::to_string(p.cu_seqlens.size) +
                  " entries, expected N + 1 >= 1");
    check_index_array(p.cu_seqlens, "cu_seqlens", p.cu_seqlens.size, false);
    check_index_array(p.position_ids, "position_ids", rows.seq, true);
    check_index_array(p.seq_offsets, "seq_offsets", p.cu_seqlens.size - 1, false);
  }
  const std::int64_t last = writes_nothing ? -1 : host_known_last_row(p, rows);
  if (last >= table_row_count)
    throw Error("cos/sin: " + std::to_string(table_row_count) + " rows, but the call uses row " +
                std::to_string(last) + " (needs at least " + std::to_string(last + 1) + ")");
}

// Rows of a [S, B, H, D] or [T, H, D] tensor.
RowShape row_shape(const ConstTensorView& v, TokenLayout layout) {
  if (layout == TokenLayout::sbhd) return {v.shape[0], v.shape[1]};
  return {v.shape[0], 1};
}

int activation_rank(TokenLayout layout) { return layout == TokenLayout::sbhd ? 4 : 3; }

// Shared rules of the rope family; `input` is t or grad_out.
void check_rope_input(const ConstTensorView& input, const char* name, const RopeArgs& args) {
  check_dim(args.nope_dim, "nope_dim");
  check_rotation(args.rotation, args.emb_dim);
  check_view(input, name, activation_rank(args.positions.layout));
  check_last_dim(input, name, args.nope_dim + args.emb_dim, "nope_dim + emb_dim");
  check_status_word(args.status);
  // The output has the input's shape (checked next): the call writes nothing when it is empty.
  check_positions(args.positions, row_shape(input, args.positions.layout),
                  table_rows(args.rotation), input.numel() == 0);
}

void check_rope_out_of_place(const ConstTensorView& in, const char* in_name,
                             const ConstTensorView& out, const char* out_name,
                             const RopeArgs& args) {
  check_rope_input(in, in_name, args);
  check_view(out, out_name, in.rank);
  check_same_dims(in, in_name, out, out_name, in.rank);
  check_same_dtype(in, in_name, out, out_name);
  check_no_self_overlap(out, out_name);
  check_output_disjoint(out, out_name,
                        concat(concat({{in_name, extent_of(in)}}, rotation_extents(args.rotation)),
                               metadata_extents(args.positions)));
}

void check_rope_in_place(const ConstTensorView& t, const char* name, const RopeArgs& args) {
  check_rope_input(t, name, args);
  check_no_self_overlap(t, name);
  check_output_disjoint(t, name,
                        concat(rotation_extents(args.rotation), metadata_extents(args.positions)));
}

void check_kv_args(const KvSplitArgs& args) {
  check_dim(args.k_dim, "k_dim");
  check_dim(args.v_dim, "v_dim");
  check_rotation(args.rotation, args.emb_dim);
  check_status_word(args.status);
}

// [.., H, X] views of a kv call: rank, leading dims equal to `kv`'s, last dim `last`.
void check_kv_view(const ConstTensorView& kv, const ConstTensorView& v, const char* name,
                   std::int64_t last, const std::string& formula) {
  check_view(v, name, kv.rank);
  check_same_dims(kv, "kv rows/heads", v, name, kv.rank - 1);
  check_last_dim(v, name, last, formula);
}

// The k_pe-like view: [.., 1, emb] with the rows of `kv`.
void check_k_pe_view(const ConstTensorView& kv, const ConstTensorView& v, const char* name,
                     std::int64_t emb_dim) {
  check_view(v, name, kv.rank);
  check_same_dims(kv, "kv rows", v, name, kv.rank - 2);
  if (v.size(-2) != 1)
    throw Error(std::string(name) + ": shape " + shape_string(v.shape.data(), v.rank) +
                ", expected one head ([..., 1, emb_dim])");
  check_last_dim(v, name, emb_dim, "emb_dim");
}

}  // namespace

void check_dim(std::int64_t value, const char* name) {
  if (value < 0) throw Error(std::string(name) + " = " + std::to_string(value) + ": expected >= 0");
  if (value > kMaxDim)
    throw Error(std::string(name) + " = " + std::to_string(value) +
                ": more than 2^61, the largest size (docs/semantics.md §5)");
}

bool writes_nothing(const RopeCall& c) { return c.out.numel() == 0; }
bool writes_nothing(const RopeInplaceCall& c) { return c.t.numel() == 0; }
bool writes_nothing(const RopeBackwardCall& c) { return c.grad_t.numel() == 0; }
bool writes_nothing(const RopeBackwardInplaceCall& c) { return c.grad.numel() == 0; }
bool writes_nothing(const KvSplitCall& c) { return c.key.numel() == 0 && c.value.numel() == 0; }
bool writes_nothing(const KvSplitBackwardCall& c) {
  return c.grad_kv.numel() == 0 && c.grad_k_pe.numel() == 0;
}

std::int64_t table_rows(const Rotation& r) { return r.cos.rank >= 1 ? r.cos.shape[0] : 0; }

std::int64_t table_row_stride(const ConstTensorView& table) { return table.strides[0]; }

void validate(const RopeCall& c) { check_rope_out_of_place(c.t, "t", c.out, "out", c.args); }

void validate(const RopeInplaceCall& c) { check_rope_in_place(c.t, "t", c.args); }

void validate(const RopeBackwardCall& c) {
  check_rope_out_of_place(c.grad_out, "grad_out", c.grad_t, "grad_t", c.args);
}

void validate(const RopeBackwardInplaceCall& c) { check_rope_in_place(c.grad, "grad", c.args); }

void validate(const KvSplitCall& c) {
  const KvSplitArgs& a = c.args;
  check_kv_args(a);
  check_view(c.kv, "kv", activation_rank(a.positions.layout));
  check_last_dim(c.kv, "kv", a.k_dim + a.v_dim, "k_dim + v_dim");
  check_k_pe_view(c.kv, c.k_pe, "k_pe", a.emb_dim);
  check_same_dtype(c.kv, "kv", c.k_pe, "k_pe");
  check_kv_view(c.kv, c.key, "key", a.k_dim + a.emb_dim, "k_dim + emb_dim");
  check_kv_view(c.kv, c.value, "value", a.v_dim, "v_dim");
  check_same_dtype(c.kv, "kv", c.key, "key");
  check_same_dtype(c.kv, "kv", c.value, "value");
  check_positions(a.positions, row_shape(c.kv, a.positions.layout), table_rows(a.rotation),
                  writes_nothing(c));
  check_no_self_overlap(c.key, "key");
  check_no_self_overlap(c.value, "value");
  const auto inputs = concat(concat({{"kv", extent_of(c.kv)}, {"k_pe", extent_of(c.k_pe)}},
                                    rotation_extents(a.rotation)),
                             metadata_extents(a.positions));
  check_output_disjoint(c.key, "key", concat(inputs, {{"value", extent_of(c.value)}}));
  check_output_disjoint(c.value, "value", inputs);
}

void validate(const KvSplitBackwardCall& c) {
  const KvSplitArgs& a = c.args;
  check_kv_args(a);
  check_view(c.grad_key, "grad_key", activation_rank(a.positions.layout));
  check_last_dim(c.grad_key, "grad_key", a.k_dim + a.emb_dim, "k_dim + emb_dim");
  check_kv_view(c.grad_key, c.grad_value, "grad_value", a.v_dim, "v_dim");
  check_kv_view(c.grad_key, c.grad_kv, "grad_kv", a.k_dim + a.v_dim, "k_dim + v_dim");
  check_k_pe_view(c.grad_key, c.grad_k_pe, "grad_k_pe", a.emb_dim);
  check_same_dtype(c.grad_key, "grad_key", c.grad_value, "grad_value");
  check_same_dtype(c.grad_key, "grad_key", c.grad_kv, "grad_kv");
  check_same_dtype(c.grad_key, "grad_key", c.grad_k_pe, "grad_k_pe");
  check_positions(a.positions, row_shape(c.grad_key, a.positions.layout), table_rows(a.rotation),
                  writes_nothing(c));
  check_no_self_overlap(c.grad_kv, "grad_kv");
  check_no_self_overlap(c.grad_k_pe, "grad_k_pe");
  const auto inputs =
      concat(concat({{"grad_key", extent_of(c.grad_key)}, {"grad_value", extent_of(c.grad_value)}},
                    rotation_extents(a.rotation)),
             metadata_extents(a.positions));
  check_output_disjoint(c.grad_kv, "grad_kv",
                        concat(inputs, {{"grad_k_pe", extent_of(c.grad_k_pe)}}));
  check_output_disjoint(c.grad_k_pe, "grad_k_pe", inputs);
}

void validate(const YarnTablesCall& c) {
  const ConstTensorView cos = c.cos, sin = c.sin;
  if (cos.rank < 1) throw Error("cos: rank 0, expected [R, emb_dim] or [R, 1, 1, emb_dim]");
  const std::int64_t emb_dim = cos.size(-1);
  if (emb_dim < 2 || emb_dim % 2 != 0 || emb_dim > kMaxDim)
    throw Error("emb_dim = " + std::to_string(emb_dim) +
                " (last dim of cos): expected an even number >= 2, at most 2^61");
  check_table(cos, "cos", emb_dim);
  check_table(sin, "sin", emb_dim);
  check_same_dims(cos, "cos", sin, "sin", cos.rank);
  check_same_dtype(cos, "cos", sin, "sin");
  check_no_self_overlap(cos, "cos");
  check_no_self_overlap(sin, "sin");
  if (overlaps(extent_of(cos), extent_of(sin))) throw Error("sin: memory overlaps cos");
  const YarnParams& p = c.params;
  auto positive = [](double x, const char* name) {
    if (!(x > 0) || !std::isfinite(x))
      throw Error(std::string(name) + " = " + std::to_string(x) + ": expected a finite number > 0");
  };
  positive(p.rotary_base, "rotary_base");
  positive(p.scaling_factor, "scaling_factor");
  positive(p.original_max_position_embeddings, "original_max_position_embeddings");
  positive(p.beta_fast, "beta_fast");
  positive(p.beta_slow, "beta_slow");
  if (p.rotary_base == 1.0) throw Error("rotary_base = 1: expected a base other than 1");
  if (!std::isfinite(p.mscale) || !std::isfinite(p.mscale_all_dim))
    throw Error("mscale / mscale_all_dim: expected finite numbers");
  // Megatron's mscale(s, m) = 0.1 * m * ln(s) + 1 for s > 1; the concentration divides by it.
  const double denominator =
      p.scaling_factor <= 1 ? 1.0 : 0.1 * p.mscale_all_dim * std::log(p.scaling_factor) + 1;
  if (std::isnan(p.concentration_override) && std::fabs(denominator) < 1e-12)
    throw Error("mscale_all_dim = " + std::to_string(p.mscale_all_dim) +
                ": makes mscale(scaling_factor, mscale_all_dim) zero, so the concentration factor "
                "is infinite");
  if (c.table_layout != PairLayout::half && c.table_layout != PairLayout::interleaved)
    throw Error("table_layout: unknown value");
  if (c.offset > kMaxDim || c.offset < -kMaxDim)  // positions offset + row stay in 63 bits
    throw Error("offset = " + std::to_string(c.offset) +
                ": beyond 2^61 in magnitude, the largest size (docs/semantics.md §5)");
}

namespace {

std::int64_t index_at(const IndexView& v, std::int64_t i) {
  return v.type == IndexType::i32 ? static_cast<const std::int32_t*>(v.data)[i]
                                  : static_cast<const std::int64_t*>(v.data)[i];
}

bool outside(std::int64_t row, std::int64_t table_rows) { return row < 0 || row >= table_rows; }

DeviceStatus check_sbhd_metadata(const Positions& p, RowShape rows, std::int64_t table_rows) {
  DeviceStatus status = kStatusOk;
  for (std::int64_t b = 0; b < rows.batch; ++b)
    for (std::int64_t s = 0; s < rows.seq; ++s) {
      std::int64_t row = cp_pos(s, rows.seq, p.cp_size, p.cp_rank);
      if (p.seq_offsets.present()) row += index_at(p.seq_offsets, b);
      if (outside(row, table_rows)) status |= kStatusRowOutsideTable;
    }
  return status;
}

}  // namespace

std::int64_t cp_pos(std::int64_t lp, std::int64_t length, std::int64_t cp_size,
                    std::int64_t cp_rank) {
  if (cp_size == 1) return lp;
  const std::int64_t half = length / 2;
  if (lp < half) return cp_rank * half + lp;
  return length * cp_size - (cp_rank + 1) * half + (lp - half);
}

DeviceStatus check_cu_seqlens(const Positions& p, std::int64_t rows) {
  const std::int64_t n = p.cu_seqlens.size - 1;
  DeviceStatus status = kStatusOk;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t g = index_at(p.cu_seqlens, i + 1) - index_at(p.cu_seqlens, i);
    if (g < 0) status |= kStatusBadCuSeqlens;
    else if (p.cp_size > 1 && g % (2 * p.cp_size) != 0) status |= kStatusBadSeqLength;
  }
  if (n >= 0 && status == kStatusOk &&
      index_at(p.cu_seqlens, n) - index_at(p.cu_seqlens, 0) >
          static_cast<__int128>(rows) * p.cp_size)
    status |= kStatusBadCuSeqlens;
  return status;
}

DeviceStatus check_device_metadata(const Positions& p, RowShape rows, std::int64_t table_rows) {
  if (p.layout == TokenLayout::sbhd) return check_sbhd_metadata(p, rows, table_rows);
  const DeviceStatus cu_status = check_cu_seqlens(p, rows.seq);
  if (cu_status != kStatusOk) return cu_status;  // every row passes through: no row is looked up
  DeviceStatus status = kStatusOk;
  const std::int64_t n = p.cu_seqlens.size - 1;
  std::int64_t local_start = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t start = index_at(p.cu_seqlens, i);
    const std::int64_t len = (index_at(p.cu_seqlens, i + 1) - start) / p.cp_size;
    for (std::int64_t lp = 0; lp < len; ++lp) {
      std::int64_t row = cp_pos(lp, len, p.cp_size, p.cp_rank);
      if (p.freq_mode == FreqMode::packed) row += start;
      if (p.seq_offsets.present()) row += index_at(p.seq_offsets, i);
      if (p.position_ids.present()) row = index_at(p.position_ids, local_start + lp);
      if (outside(row, table_rows)) status |= kStatusRowOutsideTable;
    }
    local_start += len;
  }
  return status;
}

}  // namespace mlarope
