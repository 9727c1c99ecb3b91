// SPDX-License-Identifier: Apache-2.0
// materialize(): the arrays of a case, filled deterministically from its spec and data seed.
// Each array draws from its own stream (seed and name), so shrinking one part of a spec leaves
// the values of the others alone.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

#include "backends/case_run.h"
#include "checks/strided_call.h"
#include "fuzz/case_spec.h"
#include "host_convert.h"
#include "positions.h"
#include "reference.h"
#include "rng.h"

namespace mlarope::props {
namespace {

using harness::Case;
using harness::storage_dtype;

constexpr std::int64_t kMaxOffset = 8;

npy::Array index_array(const std::vector<std::int64_t>& values, IndexType type) {
  const auto n = static_cast<std::int64_t>(values.size());
  npy::Array a = npy::make(type == IndexType::i64 ? npy::Dtype::i64 : npy::Dtype::i32, {n});
  for (std::int64_t i = 0; i < n; ++i) {
    if (type == IndexType::i64) a.data<std::int64_t>()[i] = values[i];
    else a.data<std::int32_t>()[i] = static_cast<std::int32_t>(values[i]);
  }
  return a;
}

// --- Values ------------------------------------------------------------------------------------

int log2_ceil(std::int64_t n) {
  int bits = 0;
  while ((std::int64_t{1} << bits) < n) ++bits;
  return bits;
}

// One value of distribution `values` for `dtype`; `sum_bits` keeps a sum of 2^sum_bits finite.
double draw(Values values, DType dtype, int sum_bits, Rng& rng) {
  const int top = dtype == DType::f16 ? 15 : 127, bottom = dtype == DType::f16 ? -14 : -126;
  switch (values) {
    case Values::large:
      return rng.sign() * (1 + rng.uniform()) *
             std::ldexp(1.0, top - 12 - sum_bits + static_cast<int>(rng.below(7)));
    case Values::tiny:
      return rng.sign() * (1 + rng.uniform()) *
             std::ldexp(1.0, bottom - 8 + static_cast<int>(rng.below(12)));
    case Values::signed_zeros: {
      const std::int64_t k = rng.below(4);
      if (k < 2) return k == 0 ? 0.0 : -0.0;
      return rng.normal();
    }
    case Values::normal:
    case Values::cancelling:
    case Values::nan_payloads: return rng.normal();
    case Values::ties: return 0.0;  // tie_activation()
  }
  return 0.0;
}

// Significand bits of `dtype` (the implicit one included).
int precision(DType dtype) { return dtype == DType::f32 ? 24 : dtype == DType::f16 ? 11 : 8; }

// The binade 2^e of a ties case, one per case (every activation of it): the middle of the
// range, its top (results near and past the largest finite value), its smallest normal, or
// below it (subnormal activations and results). `sum_bits` keeps sums of 2^sum_bits finite.
int tie_exponent(DType dtype, int sum_bits, Rng rng) {
  const int top = dtype == DType::f16 ? 15 : 127, bottom = dtype == DType::f16 ? -14 : -126;
  switch (rng.below(5)) {
    case 0:
    case 1: return static_cast<int>(rng.below(9)) - 4;
    case 2: return top - sum_bits;
    case 3: return bottom;
    default: return bottom - 1 - static_cast<int>(rng.below(precision(dtype) - 2));
  }
}

// One activation of a ties case: +-2^e exactly (half of them), else +-2^e (1 + k 2^(1-p));
// at the top of the range one in sixteen is +-inf (f32 results past the largest finite value).
double tie_activation(DType dtype, int exponent, Rng& rng) {
  const int p = precision(dtype);
  if (exponent >= (dtype == DType::f16 ? 15 : 127) - 8 && rng.below(16) == 0)
    return rng.sign() * INFINITY;
  const double mantissa =
      rng.below(2)
          ? 1.0
          : 1.0 + std::ldexp(static_cast<double>(rng.below(std::int64_t{1} << (p - 1))), 1 - p);
  return rng.sign() * std::ldexp(mantissa, exponent);
}

// A NaN of `dtype` with a random payload (quiet or signalling) and sign, stored bit for bit.
void store_nan(npy::Array& a, DType dtype, std::int64_t i, Rng& rng) {
  const std::uint64_t r = rng.next();
  // Not one of the runner's fill patterns (an output holding one reads as unwritten): flipping
  // payload bit 1 keeps it a NaN (their payloads have other bits set).
  auto not_a_fill = [dtype](std::uint32_t bits) {
    return harness::is_fill_pattern(dtype, bits) ? bits ^ 2u : bits;
  };
  if (dtype == DType::f32) {
    std::uint32_t bits = 0x7F800000u | static_cast<std::uint32_t>(1 + r % 0x7FFFFFu);
    if (r >> 63) bits |= 0x80000000u;
    bits = not_a_fill(bits);
    std::memcpy(&a.bytes[static_cast<std::size_t>(i) * 4], &bits, 4);
    return;
  }
  const std::uint32_t exponent = dtype == DType::f16 ? 0x7C00u : 0x7F80u;
  const std::uint32_t payload_mask = dtype == DType::f16 ? 0x3FFu : 0x7Fu;
  std::uint32_t bits = exponent | static_cast<std::uint32_t>(1 + r % payload_mask);
  if (r >> 63) bits |= 0x8000u;
  const auto half = static_cast<std::uint16_t>(not_a_fill(bits));
  std::memcpy(&a.bytes[static_cast<std::size_t>(i) * 2], &half, 2);
}

// The elements of each head of `name` that an op copies: [from, to) of the last dim.
std::pair<std::int64_t, std::int64_t> copied_part(const CaseSpec& s, const std::string& name) {
  if (name == "t" || name == "grad_out") return {0, s.nope_dim};
  if (name == "kv") return {0, s.k_dim + s.v_dim};
  if (name == "grad_value") return {0, s.v_dim};
  if (name == "grad_key") return {0, s.k_dim};
  return {0, 0};  // k_pe: rotated only
}

npy::Array activation(const CaseSpec& s, const char* name, std::vector<std::int64_t> shape) {
  const std::int64_t width = shape.back();
  npy::Array a = npy::make(storage_dtype(s.dtype), std::move(shape));
  Rng rng(s.data_seed, name);
  const int sum_bits =
      s.op == Op::kv_split_backward ? log2_ceil(std::max<std::int64_t>(s.heads, 1)) + 1 : 0;
  const int exponent = tie_exponent(s.dtype, sum_bits, Rng(s.data_seed, "binade"));
  for (std::int64_t i = 0; i < a.size(); ++i)
    store_rounded(a.bytes.data(), s.dtype, i,
                  s.values == Values::ties ? tie_activation(s.dtype, exponent, rng)
                                           : draw(s.values, s.dtype, sum_bits, rng));
  if (s.values == Values::nan_payloads) {  // one in eight copied elements
    const auto [from, to] = copied_part(s, name);
    for (std::int64_t i = 0; width > 0 && i < a.size(); ++i)
      if (i % width >= from && i % width < to && rng.below(8) == 0) store_nan(a, s.dtype, i, rng);
  }
  return a;
}

// Copy head 0 of every row into the other heads (for broadcast head-stride-0 views).
void copy_head0(npy::Array& a) {
  const std::int64_t heads = a.shape[a.shape.size() - 2];
  const std::size_t head = static_cast<std::size_t>(a.shape.back()) * npy::dtype_size(a.dtype);
  const std::size_t row = head * static_cast<std::size_t>(heads);
  for (std::size_t r = 0; row && r + row <= a.bytes.size(); r += row)
    for (std::int64_t h = 1; h < heads; ++h) std::memcpy(&a.bytes[r + h * head], &a.bytes[r], head);
}

struct Slots {
  std::int64_t u, v;
};
Slots slots(PairLayout l, std::int64_t i, std::int64_t d) {
  return l == PairLayout::half ? Slots{i, i + d / 2} : Slots{2 * i, 2 * i + 1};
}

// Make the first output of every rotated pair nearly cancel: forward u c[tu] ~ v sg s[tu],
// adjoint gu c[tu] ~ -gv sg s[tv]. `offset` is where the rope slice starts in each head.
void cancel_pairs(const CaseSpec& s, Case& c, const char* name, std::int64_t offset, bool adjoint) {
  npy::Array& x = c.arrays.at(name);
  const std::int64_t heads = x.shape[x.shape.size() - 2], width = x.shape.back(), d = s.emb_dim;
  const RowShape rows =
      x.shape.size() == 4 ? RowShape{x.shape[0], x.shape[1]} : RowShape{x.shape[0], 1};
  const reference::RowMap map = reference::map_rows(harness::positions_of(c), rows, table_rows(s));
  const double sg = s.inverse ? -1.0 : 1.0;
  Rng rng(s.data_seed, "cancel");
  for (std::size_t row = 0; row < map.freq_row.size(); ++row) {
    if (map.freq_row[row] < 0) continue;
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < d / 2; ++i) {
        const Slots p = slots(adjoint ? s.out_layout : s.in_layout, i, d),
                    t = slots(s.table_layout, i, d);
        const std::int64_t base = (static_cast<std::int64_t>(row) * heads + h) * width + offset;
        const std::int64_t table = map.freq_row[row] * d;
        const double cu =
            load_as_double(c.arrays.at("cos").bytes.data(), s.table_dtype, table + t.u);
        const double sv = load_as_double(c.arrays.at("sin").bytes.data(), s.table_dtype,
                                         table + (adjoint ? t.v : t.u));
        const double a = load_as_double(x.bytes.data(), s.dtype, base + p.u);
        if (std::fabs(sv) < 1e-3 || std::fabs(cu / sv) > 1e3) continue;
        const double jitter = rng.below(2) ? 1.0 : 1.0 + (rng.uniform() - 0.5) * 0x1.0p-10;
        const double b = (adjoint ? -a : a) * cu / (sg * sv) * jitter;
        store_rounded(x.bytes.data(), s.dtype, base + p.v, b);
      }
  }
}

// --- Tables and metadata -----------------------------------------------------------------------

void add_tables(const CaseSpec& s, Case& c) {
  const std::int64_t rows = table_rows(s), d = s.emb_dim;
  std::vector<std::int64_t> shape =
      s.table_rank4 ? std::vector<std::int64_t>{rows, 1, 1, d} : std::vector<std::int64_t>{rows, d};
  npy::Array cos = npy::make(storage_dtype(s.table_dtype), shape), sin = cos;
  if (s.values == Values::ties) {  // cos 1, sin +-2^-p: u + v 2^-p, exact in f32
    Rng rng(s.data_seed, "table");
    const double half_ulp = std::ldexp(1.0, -precision(s.dtype));
    for (std::int64_t i = 0; i < cos.size(); ++i) {
      store_rounded(cos.bytes.data(), s.table_dtype, i, 1.0);
      store_rounded(sin.bytes.data(), s.table_dtype, i, rng.sign() * half_ulp);
    }
  } else if (s.table_kind == TableKind::random) {
    Rng rng(s.data_seed, "table");
    for (npy::Array* a : {&cos, &sin})
      for (std::int64_t i = 0; i < a->size(); ++i)
        store_rounded(a->bytes.data(), s.table_dtype, i, 4 * rng.uniform() - 2);
  } else {
    YarnTablesCall y;
    y.params.scaling_factor = s.yarn_scaling;
    y.params.original_max_position_embeddings = s.yarn_scaling > 1 ? 64 : 4096;
    y.params.concentration_override = s.table_kind == TableKind::unit ? 1.0 : s.mscale;
    y.offset = s.table_offset;
    y.table_layout = s.table_layout;
    y.cos = harness::view_of(cos, s.table_dtype);
    y.sin = harness::view_of(sin, s.table_dtype);
    reference::yarn_tables(y);
  }
  c.arrays["cos"] = std::move(cos);
  c.arrays["sin"] = std::move(sin);
}

std::vector<std::int64_t> cumulative(const std::vector<std::int64_t>& lengths) {
  std::vector<std::int64_t> cu = {0};
  for (std::int64_t l : lengths) cu.push_back(cu.back() + l);
  return cu;
}

// cu_seqlens with the spec's fault applied (if it is one of cu_seqlens).
std::vector<std::int64_t> cu_seqlens(const CaseSpec& s, std::int64_t rows) {
  std::vector<std::int64_t> lengths = s.seq_lengths;
  const std::int64_t n = static_cast<std::int64_t>(lengths.size());
  if (s.fault == MetadataFault::bad_length && n > 0) lengths[0] += 1;
  if (s.fault == MetadataFault::too_long && n > 0) {
    const std::int64_t unit = s.cp_size > 1 ? 2 * s.cp_size : 1;
    const std::int64_t total = cumulative(lengths).back();
    lengths.back() += unit * ((rows * s.cp_size - total) / unit + 1);
  }
  std::vector<std::int64_t> cu = cumulative(lengths);
  if (s.fault == MetadataFault::decreasing && n > 0) cu[(n - 1) / 2 + 1] = cu[(n - 1) / 2] - 1;
  return cu;
}

void add_metadata(const CaseSpec& s, Case& c) {
  const std::int64_t rows = row_count(s), table = table_rows(s);
  Rng rng(s.data_seed, "metadata");
  const bool thd = s.layout == TokenLayout::thd;
  const bool outside = s.fault == MetadataFault::row_outside_table;
  if (thd) c.arrays["cu_seqlens"] = index_array(cu_seqlens(s, rows), IndexType::i32);
  if (thd && s.position_ids) {
    std::vector<std::int64_t> ids(rows);
    for (std::int64_t& id : ids) id = rng.below(table);
    const std::int64_t sequence_rows = rows - s.padding_rows;  // a padding row would ignore it
    if (outside && rows > 0)
      ids[sequence_rows > 0 ? sequence_rows / 2 : rows / 2] =
          rng.below(2) ? table + rng.below(3) : -1 - rng.below(3);
    c.arrays["position_ids"] = index_array(ids, s.position_ids_type);
  }
  if (s.seq_offsets) {
    std::vector<std::int64_t> offsets(thd ? s.seq_lengths.size()
                                          : static_cast<std::size_t>(s.batch));
    for (std::int64_t& o : offsets) o = rng.below(kMaxOffset + 1);
    if (outside && !s.position_ids && !offsets.empty()) offsets[offsets.size() / 2] = table;
    c.arrays["seq_offsets"] = index_array(offsets, IndexType::i32);
  }
}

std::vector<std::int64_t> rows_shape(const CaseSpec& s, std::int64_t heads, std::int64_t width) {
  if (s.layout == TokenLayout::sbhd) return {s.seq, s.batch, heads, width};
  return {row_count(s), heads, width};
}

void add_activations(const CaseSpec& s, Case& c) {
  const std::int64_t h = s.heads;
  switch (s.op) {
    case Op::rope:
      c.arrays["t"] = activation(s, "t", rows_shape(s, h, s.nope_dim + s.emb_dim));
      break;
    case Op::rope_backward:
      c.arrays["grad_out"] = activation(s, "grad_out", rows_shape(s, h, s.nope_dim + s.emb_dim));
      break;
    case Op::kv_split:
      c.arrays["kv"] = activation(s, "kv", rows_shape(s, h, s.k_dim + s.v_dim));
      c.arrays["k_pe"] = activation(s, "k_pe", rows_shape(s, 1, s.emb_dim));
      break;
    case Op::kv_split_backward:
      c.arrays["grad_key"] = activation(s, "grad_key", rows_shape(s, h, s.k_dim + s.emb_dim));
      c.arrays["grad_value"] = activation(s, "grad_value", rows_shape(s, h, s.v_dim));
      break;
  }
}

void shape_values(const CaseSpec& s, Case& c) {
  if (s.values == Values::cancelling) {
    switch (s.op) {
      case Op::rope: cancel_pairs(s, c, "t", s.nope_dim, false); break;
      case Op::rope_backward: cancel_pairs(s, c, "grad_out", s.nope_dim, true); break;
      case Op::kv_split: cancel_pairs(s, c, "k_pe", 0, false); break;
      case Op::kv_split_backward: cancel_pairs(s, c, "grad_key", s.k_dim, true); break;
    }
  }
  if (!s.plan.broadcast_heads || s.in_place) return;
  for (const char* name : {"t", "grad_out", "kv", "grad_key", "grad_value"})
    if (c.arrays.count(name)) copy_head0(c.arrays.at(name));
}

harness::CaseConfig config_of(const CaseSpec& s) {
  harness::CaseConfig k;
  k.op = s.op;
  k.layout = s.layout;
  k.dtype = s.dtype;
  k.table_dtype = s.table_dtype;
  k.nope_dim = s.nope_dim;
  k.emb_dim = s.emb_dim;
  k.k_dim = s.k_dim;
  k.v_dim = s.v_dim;
  k.in_layout = s.in_layout;
  k.out_layout = s.out_layout;
  k.table_layout = s.table_layout;
  k.inverse = s.inverse;
  k.in_place = s.in_place;
  k.cp_size = s.cp_size;
  k.cp_rank = s.cp_rank;
  const bool thd = s.layout == TokenLayout::thd;
  k.freq_mode = thd ? s.freq_mode : FreqMode::per_sequence;
  k.max_seqlen = thd && s.max_seqlen_known ? longest_sequence(s) : 0;
  return k;
}

}  // namespace

Case materialize(const CaseSpec& s) {
  Case c;
  c.config = config_of(s);
  add_tables(s, c);
  add_metadata(s, c);
  add_activations(s, c);
  shape_values(s, c);
  for (const auto& [name, array] : c.arrays) c.config.inputs[name] = name + ".npy";
  return c;
}

}  // namespace mlarope::props
