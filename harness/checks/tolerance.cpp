// SPDX-License-Identifier: Apache-2.0
#include "checks/tolerance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "backends/case_run.h"
#include "checks/compare.h"
#include "host_convert.h"
#include "mlarope/op_schema.h"
#include "positions.h"

namespace mlarope::harness {
namespace {

constexpr double kEpsF32 = std::numeric_limits<float>::epsilon();

struct PairSlots {
  std::int64_t u, v;
};
PairSlots slots(PairLayout layout, std::int64_t i, std::int64_t d) {
  return layout == PairLayout::half ? PairSlots{i, i + d / 2} : PairSlots{2 * i, 2 * i + 1};
}

double table_abs(const Case& c, const char* name, std::int64_t row, std::int64_t k) {
  const npy::Array& a = c.arrays.at(name);
  return std::fabs(value_at(a, c.config.table_dtype, row * c.config.emb_dim + k));
}

// Magnitudes of the two products behind each rotated element of one slice:
// forward y[ou] ~ |u c[tu]| + |v s[tu]|, y[ov] ~ |v c[tv]| + |u s[tv]|; the adjoint likewise.
void slice_terms(const Case& c, std::int64_t freq_row, const double* x, double* terms,
                 bool adjoint) {
  const CaseConfig& k = c.config;
  const std::int64_t d = k.emb_dim;
  for (std::int64_t i = 0; i < d / 2; ++i) {
    const PairSlots in = slots(k.in_layout, i, d), out = slots(k.out_layout, i, d),
                    tab = slots(k.table_layout, i, d);
    const double cu = table_abs(c, "cos", freq_row, tab.u),
                 su = table_abs(c, "sin", freq_row, tab.u);
    const double cv = table_abs(c, "cos", freq_row, tab.v),
                 sv = table_abs(c, "sin", freq_row, tab.v);
    if (!adjoint) {
      const double u = std::fabs(x[in.u]), v = std::fabs(x[in.v]);
      terms[out.u] = u * cu + v * su;
      terms[out.v] = v * cv + u * sv;
    } else {
      const double gu = std::fabs(x[out.u]), gv = std::fabs(x[out.v]);
      terms[in.u] = gu * cu + gv * sv;
      terms[in.v] = gu * su + gv * cv;
    }
  }
}

std::int64_t heads_of(const npy::Array& a) { return a.shape[a.shape.size() - 2]; }

std::vector<double> rope_terms(const Case& c, const reference::RowMap& map) {
  const bool adjoint = c.config.op == Op::rope_backward;
  const npy::Array& in = c.arrays.at(adjoint ? "grad_out" : "t");
  const std::int64_t heads = in.shape[in.shape.size() - 2], width = in.shape.back();
  const std::int64_t nope = c.config.nope_dim, d = c.config.emb_dim;
  std::vector<double> terms(in.size(), 0.0), x(d);
  for (std::size_t row = 0; row < map.freq_row.size(); ++row) {
    if (map.freq_row[row] == reference::RowMap::kPassThrough) continue;
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t base = (static_cast<std::int64_t>(row) * heads + h) * width + nope;
      for (std::int64_t k = 0; k < d; ++k) x[k] = value_at(in, c.config.dtype, base + k);
      slice_terms(c, map.freq_row[row], x.data(), terms.data() + base, adjoint);
    }
  }
  for (double& t : terms) t *= 4 * kEpsF32;
  return terms;
}

std::vector<double> key_terms(const Case& c, const reference::RowMap& map) {
  const npy::Array& kv = c.arrays.at("kv");
  const npy::Array& k_pe = c.arrays.at("k_pe");
  const std::int64_t heads = kv.shape[kv.shape.size() - 2], kd = c.config.k_dim,
                     d = c.config.emb_dim;
  std::vector<double> terms(map.freq_row.size() * heads * (kd + d), 0.0);
  std::vector<double> x(d), slice(d);
  for (std::size_t row = 0; row < map.freq_row.size(); ++row) {
    if (map.freq_row[row] == reference::RowMap::kPassThrough) continue;
    for (std::int64_t k = 0; k < d; ++k)
      x[k] = value_at(k_pe, c.config.dtype, static_cast<std::int64_t>(row) * d + k);
    slice_terms(c, map.freq_row[row], x.data(), slice.data(), false);
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t k = 0; k < d; ++k)
        terms[(row * heads + h) * (kd + d) + kd + k] = 4 * kEpsF32 * slice[k];
  }
  return terms;
}

std::vector<double> grad_k_pe_terms(const Case& c, const reference::RowMap& map) {
  const npy::Array& gk = c.arrays.at("grad_key");
  const std::int64_t heads = gk.shape[gk.shape.size() - 2], kd = c.config.k_dim,
                     d = c.config.emb_dim;
  std::vector<double> terms(map.freq_row.size() * d, 0.0), sum(d), sum_terms(d), head(d),
      head_terms(d);
  for (std::size_t row = 0; row < map.freq_row.size(); ++row) {
    const std::int64_t freq_row = map.freq_row[row];
    const bool pass = freq_row == reference::RowMap::kPassThrough;
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(head_terms.begin(), head_terms.end(), 0.0);
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t k = 0; k < d; ++k) {
        head[k] = value_at(gk, c.config.dtype,
                           (static_cast<std::int64_t>(row) * heads + h) * (kd + d) + kd + k);
        sum[k] += head[k];
      }
      // Error of summing the heads in f32 first, carried through the rotation.
      if (pass) {
        for (std::int64_t k = 0; k < d; ++k) head_terms[k] += std::fabs(head[k]);
      } else {
        slice_terms(c, freq_row, head.data(), sum_terms.data(), true);
        for (std::int64_t k = 0; k < d; ++k) head_terms[k] += sum_terms[k];
      }
    }
    if (!pass) slice_terms(c, freq_row, sum.data(), sum_terms.data(), true);
    for (std::int64_t k = 0; k < d; ++k)
      terms[row * d + k] =
          (pass ? 0.0 : 4 * kEpsF32 * sum_terms[k]) + heads * kEpsF32 * head_terms[k];
  }
  return terms;
}

double table_value(const Case& c, const char* name, std::int64_t row, std::int64_t k) {
  return value_at(c.arrays.at(name), c.config.table_dtype, row * c.config.emb_dim + k);
}

// Exactness of x = a * b + e * f (each operand an f32 number): both products and the sum are
// f32 numbers, computed exactly in double; a tie when x is halfway between two `out` values.
Exactness exactness_of(double a, double b, double e, double f, DType out) {
  const double p = a * b, q = e * f;  // exact: 24-bit times 24-bit significands
  if (!std::isfinite(p) || !std::isfinite(q) || static_cast<float>(p) != p ||
      static_cast<float>(q) != q)
    return Exactness::inexact;
  const double x = p + q;
  if (x - p != q || static_cast<float>(x) != x) return Exactness::inexact;  // the sum rounded
  const double r = round_to(out, x);  // a tie is half the spacing of x's own binade away
  return std::isfinite(r) && r != x && std::fabs(x - r) == 0.5 * ulp_of(out, x) ? Exactness::tie
                                                                                : Exactness::exact;
}

// The signed formulas of docs/semantics.md §3 for one slice: forward y_u = u c_u - sg v s_u,
// y_v = v c_v + sg u s_v; the adjoint g_u' = gu c_u + sg gv s_v, g_v' = gv c_v - sg gu s_u.
void slice_exactness(const Case& c, std::int64_t freq_row, const double* x, Exactness* out_flags,
                     bool adjoint) {
  const CaseConfig& k = c.config;
  const std::int64_t d = k.emb_dim;
  const double sg = k.inverse ? -1.0 : 1.0;
  for (std::int64_t i = 0; i < d / 2; ++i) {
    const PairSlots in = slots(k.in_layout, i, d), out = slots(k.out_layout, i, d),
                    tab = slots(k.table_layout, i, d);
    const double cu = table_value(c, "cos", freq_row, tab.u),
                 su = table_value(c, "sin", freq_row, tab.u);
    const double cv = table_value(c, "cos", freq_row, tab.v),
                 sv = table_value(c, "sin", freq_row, tab.v);
    if (!adjoint) {
      const double u = x[in.u], v = x[in.v];
      out_flags[out.u] = exactness_of(u, cu, -sg * v, su, k.dtype);
      out_flags[out.v] = exactness_of(v, cv, sg * u, sv, k.dtype);
    } else {
      const double gu = x[out.u], gv = x[out.v];
      out_flags[in.u] = exactness_of(gu, cu, sg * gv, sv, k.dtype);
      out_flags[in.v] = exactness_of(gv, cv, -sg * gu, su, k.dtype);
    }
  }
}

}  // namespace

std::map<std::string, std::vector<Exactness>> exactness(const Case& c) {
  const CaseConfig& k = c.config;
  const npy::Array& in = c.arrays.at(std::string(schema_of(k.op).activation()));
  const reference::RowMap map = row_map(c);
  const std::int64_t heads = heads_of(in), d = k.emb_dim;
  std::map<std::string, std::vector<Exactness>> flags;
  std::vector<double> x(d);
  std::vector<Exactness> slice(d);
  if (k.op == Op::rope || k.op == Op::rope_backward) {
    const bool adjoint = k.op == Op::rope_backward;
    const std::int64_t width = in.shape.back();
    std::vector<Exactness>& f = flags[adjoint ? "grad_t" : "out"];
    f.assign(in.size(), Exactness::inexact);
    for (std::size_t row = 0; row < map.freq_row.size(); ++row) {
      if (map.freq_row[row] == reference::RowMap::kPassThrough) continue;
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t base = (static_cast<std::int64_t>(row) * heads + h) * width + k.nope_dim;
        for (std::int64_t j = 0; j < d; ++j) x[j] = value_at(in, k.dtype, base + j);
        slice_exactness(c, map.freq_row[row], x.data(), f.data() + base, adjoint);
      }
    }
  } else if (k.op == Op::kv_split) {
    const npy::Array& k_pe = c.arrays.at("k_pe");
    std::vector<Exactness>& f = flags["key"];
    f.assign(map.freq_row.size() * heads * (k.k_dim + d), Exactness::inexact);
    for (std::size_t row = 0; row < map.freq_row.size(); ++row) {
      if (map.freq_row[row] == reference::RowMap::kPassThrough) continue;
      for (std::int64_t j = 0; j < d; ++j)
        x[j] = value_at(k_pe, k.dtype, static_cast<std::int64_t>(row) * d + j);
      slice_exactness(c, map.freq_row[row], x.data(), slice.data(), false);
      for (std::int64_t h = 0; h < heads; ++h)
        std::copy(slice.begin(), slice.end(),
                  f.begin() + (static_cast<std::int64_t>(row) * heads + h) * (k.k_dim + d) +
                      k.k_dim);
    }
  }
  return flags;
}

std::map<std::string, std::vector<double>> f32_error_terms(const Case& c) {
  const npy::Array& in = c.arrays.at(std::string(schema_of(c.config.op).activation()));
  const reference::RowMap map = row_map(c);
  std::map<std::string, std::vector<double>> terms;
  switch (c.config.op) {
    case Op::rope: terms["out"] = rope_terms(c, map); break;
    case Op::rope_backward: terms["grad_t"] = rope_terms(c, map); break;
    case Op::kv_split:
      terms["key"] = key_terms(c, map);
      terms["value"].assign(map.freq_row.size() * heads_of(in) * c.config.v_dim, 0.0);
      break;
    case Op::kv_split_backward:
      terms["grad_kv"].assign(
          map.freq_row.size() * heads_of(in) * (c.config.k_dim + c.config.v_dim), 0.0);
      terms["grad_k_pe"] = grad_k_pe_terms(c, map);
      break;
  }
  return terms;
}

ToleranceResult check_tolerance(const Case& c, const std::map<std::string, npy::Array>& got,
                                const std::map<std::string, npy::Array>& expected) {
  const auto terms = f32_error_terms(c);
  ToleranceResult result;
  for (const auto& [name, bound_terms] : terms) {
    const npy::Array& g = got.at(name);
    const npy::Array& e = expected.at(name);
    if (g.shape != e.shape || g.size() != static_cast<std::int64_t>(bound_terms.size())) {
      ++result.violations;
      if (result.first_violation.empty()) result.first_violation = name + ": shape differs";
      continue;
    }
    for (std::int64_t i = 0; i < g.size(); ++i) {
      const double gv = value_at(g, c.config.dtype, i), ev = value_at(e, c.config.dtype, i);
      ++result.checked;
      if (std::isnan(gv) && std::isnan(ev)) continue;
      const double err = std::fabs(gv - ev), ulp = ulp_of(c.config.dtype, ev);
      result.max_ulps = std::max(result.max_ulps, err / ulp);
      const double allowed = bound_terms[i] == 0.0 ? 0.0 : ulp + bound_terms[i];
      // Copied elements must be exact; the expected values may be float64, so allow their rounding.
      const double exact_allowed = bound_terms[i] == 0.0 ? 0.5 * ulp : allowed;
      if (!(err <= exact_allowed)) {
        if (result.violations++ == 0) {
          std::ostringstream s;
          s.precision(9);
          s << name << index_string(i, g.shape) << ": expected " << ev << ", got " << gv
            << ", allowed " << exact_allowed << " (" << err / ulp << " ulp)";
          result.first_violation = s.str();
        }
      }
    }
  }
  return result;
}

}  // namespace mlarope::harness
