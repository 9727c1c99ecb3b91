// SPDX-License-Identifier: Apache-2.0
// Shared helpers of the reference tests: tensors in std::vector storage (contiguous or strided,
// with guard elements around them), deterministic data from a seed, tables, exact rounding and
// ulp distances.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "host_convert.h"
#include "mlarope/megatron.h"
#include "mlarope/ops.h"
#include "mlarope/tensor.h"
#include "mlarope/types.h"
#include "reference.h"
#include "rng.h"

namespace mlarope::test {

inline constexpr double kPi = 3.14159265358979323846;

/// The tests' generator (rng.h).
using Rng = ::mlarope::Rng;

/// A tensor of one DType in std::vector storage, seen through a strided view. Strides are in
/// elements and must be >= 0; `guard` spare elements sit before and after the viewed span, so a
/// test can check that a call writes nothing outside (or in the gaps of) a view.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<std::int64_t> shape, std::vector<std::int64_t> strides = {},
             std::int64_t guard = 0)
      : dtype_(dtype), shape_(std::move(shape)), strides_(std::move(strides)), guard_(guard) {
    if (strides_.empty()) {
      strides_.assign(shape_.size(), 0);
      std::int64_t stride = 1;
      for (int d = static_cast<int>(shape_.size()) - 1; d >= 0; --d) {
        strides_[d] = stride;
        stride *= shape_[d];
      }
    }
    std::int64_t span = numel() > 0 ? 1 : 0;
    for (std::size_t d = 0; d < shape_.size() && numel() > 0; ++d)
      span += (shape_[d] - 1) * strides_[d];
    const std::int64_t elements = span + 2 * guard_;
    words_.assign(static_cast<std::size_t>((elements * element_size() + 3) / 4 + 1), 0u);
  }

  DType dtype() const { return dtype_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  const std::vector<std::int64_t>& strides() const { return strides_; }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (std::int64_t s : shape_) n *= s;
    return n;
  }
  std::int64_t element_size() const { return static_cast<std::int64_t>(dtype_size(dtype_)); }

  /// Pointer to element 0 of the view.
  void* data() { return bytes_begin() + guard_ * element_size(); }
  const void* data() const { return bytes_begin() + guard_ * element_size(); }

  TensorView view() {
    TensorView v;
    v.data = data();
    v.dtype = dtype_;
    v.rank = rank();
    for (int d = 0; d < rank(); ++d) {
      v.shape[d] = shape_[d];
      v.strides[d] = strides_[d];
    }
    return v;
  }
  ConstTensorView view() const { return const_cast<HostTensor*>(this)->view(); }
  ConstTensorView cview() const { return view(); }

  std::int64_t offset(const std::vector<std::int64_t>& index) const {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < index.size(); ++d) off += index[d] * strides_[d];
    return off;
  }
  /// Element at `index` as a double (exact).
  double get(const std::vector<std::int64_t>& index) const {
    return load_as_double(data(), dtype_, offset(index));
  }
  /// Store x rounded once to the dtype.
  void set(const std::vector<std::int64_t>& index, double x) {
    store_rounded(data(), dtype_, offset(index), x);
  }
  /// Raw bits of the element at `index` (16 or 32 of them).
  std::uint32_t bits(const std::vector<std::int64_t>& index) const {
    return bits_at(offset(index));
  }
  void set_bits(const std::vector<std::int64_t>& index, std::uint32_t bits) {
    char* p = static_cast<char*>(data()) + offset(index) * element_size();
    if (element_size() == 4) {
      std::memcpy(p, &bits, 4);
    } else {
      const std::uint16_t b = static_cast<std::uint16_t>(bits);
      std::memcpy(p, &b, 2);
    }
  }

  /// Every element of the storage (view, gaps and guards) set to the bit pattern.
  void fill_bits(std::uint32_t pattern) {
    const std::int64_t n = static_cast<std::int64_t>(words_.size()) * 4 / element_size();
    char* base = bytes_begin();
    for (std::int64_t i = 0; i < n; ++i) {
      if (element_size() == 4) {
        std::memcpy(base + 4 * i, &pattern, 4);
      } else {
        const std::uint16_t p = static_cast<std::uint16_t>(pattern);
        std::memcpy(base + 2 * i, &p, 2);
      }
    }
  }

  /// The whole storage, bit for bit (view, gaps and guards).
  const std::vector<std::uint32_t>& storage() const { return words_; }

  /// Call f(index) for every index of the view, in C order.
  void for_each_index(const std::function<void(const std::vector<std::int64_t>&)>& f) const {
    if (numel() == 0) return;
    std::vector<std::int64_t> index(shape_.size(), 0);
    while (true) {
      f(index);
      int d = rank() - 1;
      for (; d >= 0; --d) {
        if (++index[d] < shape_[d]) break;
        index[d] = 0;
      }
      if (d < 0) return;
    }
  }

 private:
  char* bytes_begin() { return reinterpret_cast<char*>(words_.data()); }
  const char* bytes_begin() const { return reinterpret_cast<const char*>(words_.data()); }
  std::uint32_t bits_at(std::int64_t off) const {
    const char* p = static_cast<const char*>(data()) + off * element_size();
    if (element_size() == 4) {
      std::uint32_t b;
      std::memcpy(&b, p, 4);
      return b;
    }
    std::uint16_t b;
    std::memcpy(&b, p, 2);
    return b;
  }

  DType dtype_ = DType::f32;
  std::vector<std::int64_t> shape_, strides_;
  std::int64_t guard_ = 0;
  std::vector<std::uint32_t> words_;
};

/// Every element of the view set to a value drawn uniformly from [lo, hi), rounded once.
inline void fill_uniform(HostTensor& t, Rng& rng, double lo = -1.0, double hi = 1.0) {
  t.for_each_index([&](const std::vector<std::int64_t>& i) { t.set(i, rng.uniform(lo, hi)); });
}

/// Every element set to a random sign times a magnitude in [lo, hi).
inline void fill_signed(HostTensor& t, Rng& rng, double lo, double hi) {
  t.for_each_index(
      [&](const std::vector<std::int64_t>& i) { t.set(i, rng.signed_magnitude(lo, hi)); });
}

/// Number of view elements whose bits differ, with the first few listed in `report`.
inline std::int64_t count_bit_mismatches(const HostTensor& a, const HostTensor& b,
                                         std::string* report = nullptr) {
  std::int64_t mismatches = 0;
  std::ostringstream s;
  a.for_each_index([&](const std::vector<std::int64_t>& i) {
    if (a.bits(i) == b.bits(i)) return;
    if (++mismatches <= 5) {
      s << " [";
      for (std::size_t d = 0; d < i.size(); ++d) s << (d ? "," : "") << i[d];
      s << "] " << a.get(i) << " vs " << b.get(i) << ";";
    }
  });
  if (report) *report = s.str();
  return mismatches;
}

/// gtest assertion: the two views hold the same bits element by element.
inline ::testing::AssertionResult same_bits(const HostTensor& a, const HostTensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "shapes or dtypes differ";
  std::string report;
  const std::int64_t n = count_bit_mismatches(a, b, &report);
  if (n == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << n << " of " << a.numel() << " elements differ:" << report;
}

/// gtest assertion: the two storages (views, gaps and guards) are bitwise equal.
inline ::testing::AssertionResult same_storage(const HostTensor& a, const HostTensor& b) {
  if (a.storage() == b.storage()) return ::testing::AssertionSuccess();
  std::int64_t first = -1, count = 0;
  for (std::size_t i = 0; i < a.storage().size() && i < b.storage().size(); ++i)
    if (a.storage()[i] != b.storage()[i]) {
      if (first < 0) first = static_cast<std::int64_t>(i);
      ++count;
    }
  return ::testing::AssertionFailure() << count << " storage words differ, first at word " << first;
}

// --- Exact rounding and ulps -------------------------------------------------------------------

/// The double nearest to x with ties to the odd neighbour (round to odd): rounding it once more
/// to float, f16 or bf16 gives the correctly rounded x (no double-rounding error).
inline double round_to_odd_double(long double x) {
  double d = static_cast<double>(x);
  if (static_cast<long double>(d) == x || std::isnan(x) || std::isinf(d)) return d;
  std::uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  if ((bits & 1u) == 0) {
    const bool d_above = std::fabs(static_cast<long double>(d)) > std::fabs(x);
    bits = d_above ? bits - 1 : bits + 1;
    std::memcpy(&d, &bits, sizeof d);
  }
  return d;
}

/// x (computed in long double) rounded once, to nearest even, to `dtype`.
inline double round_once(DType dtype, long double x) {
  return round_to(dtype, round_to_odd_double(x));
}

/// Bits of x (a value of `dtype`) as an integer whose order is the order of the values.
inline std::int64_t ordered_bits(DType dtype, double x) {
  std::int64_t magnitude, negative;
  if (dtype == DType::f32) {
    const float f = static_cast<float>(x);
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    magnitude = b & 0x7FFFFFFFu;
    negative = b >> 31;
  } else {
    const std::uint16_t b =
        dtype == DType::f16 ? f16_bits_from_double(x) : bf16_bits_from_double(x);
    magnitude = b & 0x7FFF;
    negative = b >> 15;
  }
  return negative ? -magnitude : magnitude;
}

/// The spacing of `dtype` values at x (its ulp): 2^(exponent - mantissa bits), subnormals included.
inline double ulp_of(DType dtype, double x) {
  const int mantissa = dtype == DType::f32 ? 23 : dtype == DType::f16 ? 10 : 7;
  const int min_exponent = dtype == DType::f16 ? -14 : -126;
  const int e = x == 0 ? min_exponent : std::max(std::ilogb(x), min_exponent);
  return std::ldexp(1.0, e - mantissa);
}

/// Distance in units in the last place of `dtype` between two values of that type (+0 == -0).
inline std::int64_t ulp_distance(DType dtype, double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<std::int64_t>::max();
  const std::int64_t d = ordered_bits(dtype, a) - ordered_bits(dtype, b);
  return d < 0 ? -d : d;
}

// --- Tables, layouts, calls --------------------------------------------------------------------

/// cos and sin tables of one call.
struct Table {
  HostTensor cos, sin;
};

/// Entries (tu, tv) of pair i in a slice of d elements.
inline std::pair<std::int64_t, std::int64_t> pair_entries(PairLayout layout, std::int64_t i,
                                                          std::int64_t d) {
  if (layout == PairLayout::half) return {i, i + d / 2};
  return {2 * i, 2 * i + 1};
}

/// A unit table [rows, d]: pair i of row r holds m * cos(angle(r, i)) and m * sin(angle(r, i))
/// at both of its entries in `layout`.
inline Table angle_table(DType dtype, std::int64_t rows, std::int64_t d, PairLayout layout,
                         const std::function<double(std::int64_t, std::int64_t)>& angle,
                         double m = 1.0) {
  Table t{HostTensor(dtype, {rows, d}), HostTensor(dtype, {rows, d})};
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < d / 2; ++i) {
      const auto [tu, tv] = pair_entries(layout, i, d);
      const double a = angle(r, i);
      for (std::int64_t k : {tu, tv}) {
        t.cos.set({r, k}, m * std::cos(a));
        t.sin.set({r, k}, m * std::sin(a));
      }
    }
  return t;
}

/// A unit table of random angles in [-pi, pi).
inline Table random_unit_table(DType dtype, std::int64_t rows, std::int64_t d, PairLayout layout,
                               Rng& rng, double m = 1.0) {
  std::vector<double> angles(static_cast<std::size_t>(rows * (d / 2)));
  for (double& a : angles) a = rng.uniform(-kPi, kPi);
  return angle_table(
      dtype, rows, d, layout,
      [&](std::int64_t r, std::int64_t i) {
        return angles[static_cast<std::size_t>(r * (d / 2) + i)];
      },
      m);
}

/// An arbitrary table: every entry independent and uniform in [-1, 1).
inline Table random_table(DType dtype, std::int64_t rows, std::int64_t d, Rng& rng) {
  Table t{HostTensor(dtype, {rows, d}), HostTensor(dtype, {rows, d})};
  fill_uniform(t.cos, rng);
  fill_uniform(t.sin, rng);
  return t;
}

/// A table whose every row is the same given cos and sin vectors.
inline Table constant_table(DType dtype, std::int64_t rows, const std::vector<double>& c,
                            const std::vector<double>& s) {
  const std::int64_t d = static_cast<std::int64_t>(c.size());
  Table t{HostTensor(dtype, {rows, d}), HostTensor(dtype, {rows, d})};
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t k = 0; k < d; ++k) {
      t.cos.set({r, k}, c[k]);
      t.sin.set({r, k}, s[k]);
    }
  return t;
}

/// All eight (in, out, table) layout triples.
inline std::vector<LayoutTriple> all_triples() {
  std::vector<LayoutTriple> triples;
  for (PairLayout in : {PairLayout::half, PairLayout::interleaved})
    for (PairLayout out : {PairLayout::half, PairLayout::interleaved})
      for (PairLayout table : {PairLayout::half, PairLayout::interleaved})
        triples.push_back({in, out, table});
  return triples;
}

inline std::string describe(const LayoutTriple& t) {
  return "in=" + std::string(to_string(t.in_layout)) +
         " out=" + std::string(to_string(t.out_layout)) +
         " table=" + std::string(to_string(t.table_layout));
}

/// The rotation of a layout triple over a table.
inline Rotation make_rotation(const LayoutTriple& layouts, bool inverse, const Table& table) {
  Rotation r;
  r.in_layout = layouts.in_layout;
  r.out_layout = layouts.out_layout;
  r.table_layout = layouts.table_layout;
  r.inverse = inverse;
  r.cos = table.cos.cview();
  r.sin = table.sin.cview();
  return r;
}

inline IndexView index_view(const std::vector<std::int32_t>& v) {
  return {v.data(), IndexType::i32, static_cast<std::int64_t>(v.size())};
}
inline IndexView index_view(const std::vector<std::int64_t>& v) {
  return {v.data(), IndexType::i64, static_cast<std::int64_t>(v.size())};
}

/// SBHD positions, no metadata.
inline Positions sbhd_positions(std::int64_t cp_size = 1, std::int64_t cp_rank = 0) {
  Positions p;
  p.layout = TokenLayout::sbhd;
  p.cp_size = cp_size;
  p.cp_rank = cp_rank;
  return p;
}

/// THD positions over host cu_seqlens (which must outlive the Positions).
inline Positions thd_positions(const std::vector<std::int32_t>& cu_seqlens,
                               FreqMode mode = FreqMode::per_sequence, std::int64_t cp_size = 1,
                               std::int64_t cp_rank = 0, std::int64_t max_seqlen = 0) {
  Positions p;
  p.layout = TokenLayout::thd;
  p.cp_size = cp_size;
  p.cp_rank = cp_rank;
  p.freq_mode = mode;
  p.max_seqlen = max_seqlen;
  p.cu_seqlens = index_view(cu_seqlens);
  return p;
}

inline RopeArgs rope_args(std::int64_t nope_dim, std::int64_t emb_dim, const Rotation& rotation,
                          const Positions& positions, DeviceStatus* status = nullptr) {
  RopeArgs a;
  a.nope_dim = nope_dim;
  a.emb_dim = emb_dim;
  a.rotation = rotation;
  a.positions = positions;
  a.status = status;
  return a;
}

inline KvSplitArgs kv_args(std::int64_t k_dim, std::int64_t v_dim, std::int64_t emb_dim,
                           const Rotation& rotation, const Positions& positions,
                           DeviceStatus* status = nullptr) {
  KvSplitArgs a;
  a.k_dim = k_dim;
  a.v_dim = v_dim;
  a.emb_dim = emb_dim;
  a.rotation = rotation;
  a.positions = positions;
  a.status = status;
  return a;
}

/// <a, b> over the views, in long double.
inline long double dot(const HostTensor& a, const HostTensor& b) {
  long double sum = 0;
  a.for_each_index([&](const std::vector<std::int64_t>& i) {
    sum += static_cast<long double>(a.get(i)) * b.get(i);
  });
  return sum;
}
/// sum |a_i b_i| over the views.
inline long double dot_abs(const HostTensor& a, const HostTensor& b) {
  long double sum = 0;
  a.for_each_index([&](const std::vector<std::int64_t>& i) {
    sum += std::fabs(static_cast<long double>(a.get(i)) * b.get(i));
  });
  return sum;
}

inline const char* dtype_name(DType d) { return to_string(d).data(); }

// --- Running the reference -----------------------------------------------------------------------

/// rope(t) into a fresh contiguous tensor.
inline HostTensor run_rope(const HostTensor& t, const RopeArgs& args) {
  HostTensor out(t.dtype(), t.shape());
  reference::rope({t.cview(), out.view(), args});
  return out;
}
/// rope_inplace on a copy of t.
inline HostTensor run_rope_inplace(HostTensor t, const RopeArgs& args) {
  reference::rope_inplace({t.view(), args});
  return t;
}
/// rope_backward(grad_out) into a fresh contiguous tensor.
inline HostTensor run_rope_backward(const HostTensor& grad_out, const RopeArgs& args) {
  HostTensor grad_t(grad_out.dtype(), grad_out.shape());
  reference::rope_backward({grad_out.cview(), grad_t.view(), args});
  return grad_t;
}
/// rope_backward_inplace on a copy of grad.
inline HostTensor run_rope_backward_inplace(HostTensor grad, const RopeArgs& args) {
  reference::rope_backward_inplace({grad.view(), args});
  return grad;
}

/// Elements [begin, begin + count) of the last dim at the leading index `prefix`, as doubles.
inline std::vector<double> last_dim_values(const HostTensor& t, std::vector<std::int64_t> prefix,
                                           std::int64_t begin, std::int64_t count) {
  std::vector<double> v;
  prefix.push_back(0);
  for (std::int64_t k = begin; k < begin + count; ++k) {
    prefix.back() = k;
    v.push_back(t.get(prefix));
  }
  return v;
}

/// The formula of docs/semantics.md §3 (forward) or §4 (adjoint) for one slice, in long double:
/// exact for stored f32/f16/bf16 values whose products are not too far apart in magnitude.
inline std::vector<long double> formula(const std::vector<double>& x, const std::vector<double>& c,
                                        const std::vector<double>& s, const LayoutTriple& l,
                                        bool inverse, bool adjoint = false) {
  const std::int64_t d = static_cast<std::int64_t>(x.size());
  const long double sg = inverse ? -1.0L : 1.0L;
  std::vector<long double> y(static_cast<std::size_t>(d), 0.0L);
  for (std::int64_t i = 0; i < d / 2; ++i) {
    const auto [iu, iv] = pair_entries(l.in_layout, i, d);
    const auto [ou, ov] = pair_entries(l.out_layout, i, d);
    const auto [tu, tv] = pair_entries(l.table_layout, i, d);
    if (!adjoint) {
      const long double u = x[iu], v = x[iv];
      y[ou] = u * c[tu] - v * sg * s[tu];
      y[ov] = v * c[tv] + u * sg * s[tv];
    } else {
      const long double gu = x[ou], gv = x[ov];
      y[iu] = gu * c[tu] + gv * sg * s[tv];
      y[iv] = -gu * sg * s[tu] + gv * c[tv];
    }
  }
  return y;
}

}  // namespace mlarope::test
