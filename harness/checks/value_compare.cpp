// SPDX-License-Identifier: Apache-2.0
#include "checks/value_compare.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "checks/compare.h"
#include "checks/tolerance.h"
#include "mlarope/op_schema.h"
#include "positions.h"

namespace mlarope::harness {
namespace {

// Elements of a [rows, H, W] output that copy an input: dims below `prefix`, or whole rows
// that pass through when `rows_pass` is set.
std::vector<bool> copy_mask(const reference::RowMap& map, std::int64_t heads, std::int64_t width,
                            std::int64_t prefix, bool rows_pass) {
  std::vector<bool> mask(map.freq_row.size() * heads * width, false);
  for (std::size_t row = 0; row < map.freq_row.size(); ++row) {
    const bool pass = rows_pass && map.freq_row[row] == reference::RowMap::kPassThrough;
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t d = 0; d < width; ++d)
        mask[(row * heads + h) * width + d] = pass || d < prefix;
  }
  return mask;
}

bool same_bits(const npy::Array& a, const npy::Array& b, std::int64_t i) {
  const std::size_t es = npy::dtype_size(a.dtype);
  return std::memcmp(&a.bytes[i * es], &b.bytes[i * es], es) == 0;
}

std::string number(double x) {
  std::ostringstream s;
  s.precision(9);
  s << x;
  return s.str();
}

// The worst element of one comparison so far.
struct Worst {
  double ratio = -1;  // error / allowed; inf for a bitwise mismatch
  std::string tensor;
  std::int64_t flat = -1;
  double expected = 0, got = 0, ulps = 0, allowed_ulps = 0;
  bool bitwise = false;
  bool exact = false;  // an exact f32 computation: within 0
};

void note(Worst& w, double ratio, const std::string& tensor, std::int64_t flat, double e, double g,
          double ulps, double allowed_ulps, bool bitwise, bool exact = false) {
  if (ratio > w.ratio) w = {ratio, tensor, flat, e, g, ulps, allowed_ulps, bitwise, exact};
}

}  // namespace

void set_element(CheckResult& r, const std::string& tensor, const std::vector<std::int64_t>& shape,
                 std::int64_t flat) {
  r.tensor = tensor;
  r.index.assign(shape.size(), 0);
  std::int64_t rest = flat;
  for (std::size_t d = shape.size(); d-- > 0;) {
    r.index[d] = shape[d] ? rest % shape[d] : 0;
    rest = shape[d] ? rest / shape[d] : 0;
  }
  if (shape.size() < 3) return;
  const std::int64_t width = shape.back(), heads = shape[shape.size() - 2];
  r.dim = width ? flat % width : 0;
  r.head = heads && width ? (flat / width) % heads : 0;
  r.token = heads && width ? flat / (width * heads) : 0;
}

std::string element_string(const CheckResult& r) {
  if (r.tensor.empty()) return "";
  std::string s = r.tensor + "[";
  for (std::size_t d = 0; d < r.index.size(); ++d)
    s += (d ? ", " : "") + std::to_string(r.index[d]);
  s += "]";
  if (r.token >= 0)
    s += " (token " + std::to_string(r.token) + ", head " + std::to_string(r.head) + ", dim " +
         std::to_string(r.dim) + ")";
  return s;
}

ValueContext value_context(const Case& c) {
  ValueContext ctx;
  ctx.terms = f32_error_terms(c);
  ctx.exact = exactness(c);
  const CaseConfig& k = c.config;
  const npy::Array& in = c.arrays.at(std::string(schema_of(k.op).activation()));
  const reference::RowMap map = row_map(c);
  const std::int64_t heads = in.shape[in.shape.size() - 2];
  switch (k.op) {
    case Op::rope:
    case Op::rope_backward:
      ctx.copied[k.op == Op::rope ? "out" : "grad_t"] =
          copy_mask(map, heads, k.nope_dim + k.emb_dim, k.nope_dim, true);
      break;
    case Op::kv_split:
      ctx.copied["key"] = copy_mask(map, heads, k.k_dim + k.emb_dim, k.k_dim, true);
      ctx.copied["value"] = copy_mask(map, heads, k.v_dim, k.v_dim, false);
      break;
    case Op::kv_split_backward:
      ctx.copied["grad_kv"] = copy_mask(map, heads, k.k_dim + k.v_dim, k.k_dim + k.v_dim, false);
      ctx.copied["grad_k_pe"] = copy_mask(map, 1, k.emb_dim, 0, false);
      break;
  }
  return ctx;
}

CheckResult compare_outputs(const Case& c, const ValueContext& ctx, const CaseOutputs& got,
                            const CaseOutputs& expected, CheckKind kind, double factor,
                            UlpHistogram* histogram, const std::string& what) {
  CheckResult r;
  r.check = kind;
  const DType dtype = c.config.dtype;
  Worst worst;
  std::int64_t count = 0;
  for (const std::string& name : schema_of(c.config.op).output_names()) {
    const auto g_it = got.arrays.find(name), e_it = expected.arrays.find(name);
    if (g_it == got.arrays.end() || e_it == expected.arrays.end() ||
        g_it->second.shape != e_it->second.shape) {
      r.outcome = Outcome::fail;
      ++r.failures;
      r.max_fraction = INFINITY;
      r.tensor = name;
      r.message = what + name + ": missing or of another shape";
      return r;
    }
    const npy::Array &g = g_it->second, &e = e_it->second;
    const std::vector<double>& terms = ctx.terms.at(name);
    const std::vector<bool>& copied = ctx.copied.at(name);
    const auto exact_it = ctx.exact.find(name);
    const std::vector<Exactness>* exact = exact_it == ctx.exact.end() ? nullptr : &exact_it->second;
    for (std::int64_t i = 0; i < g.size(); ++i, ++count) {
      const double gv = value_at(g, dtype, i), ev = value_at(e, dtype, i);
      const double ulp = ulp_of(dtype, ev);
      const double ulps = gv == ev ? 0.0 : std::fabs(gv - ev) / ulp;
      // Ulps measure an error only where the allowance is relative: where the f32 term (from
      // |u c| + |v s|, large when they cancel to a small result) is below the output's ulp.
      if (!(std::isnan(gv) && std::isnan(ev)) && terms[i] <= ulp) {
        r.max_ulps = std::max(r.max_ulps, std::isnan(ulps) ? INFINITY : ulps);
        if (histogram) histogram->add(ulps);
      }
      if (copied[i]) {
        if (same_bits(g, e, i)) continue;
        ++r.failures;
        r.max_fraction = INFINITY;
        note(worst, INFINITY, name, i, ev, gv, ulps, 0, true);
        continue;
      }
      if ((std::isnan(gv) && std::isnan(ev)) || gv == ev) continue;
      if (exact && (*exact)[static_cast<std::size_t>(i)] !=
                       Exactness::inexact) {  // the output's rounding only
        ++r.failures;
        r.max_fraction = INFINITY;
        note(worst, INFINITY, name, i, ev, gv, ulps, 0, false, true);
        continue;
      }
      const double allowed = factor * (ulp + terms[i]);
      const double err = std::fabs(gv - ev);
      const double fraction = std::isnan(err) ? INFINITY : err / allowed;
      r.max_fraction = std::max(r.max_fraction, fraction);
      if (err <= allowed) continue;
      ++r.failures;
      note(worst, std::isnan(err) ? INFINITY : err / allowed, name, i, ev, gv, ulps, allowed / ulp,
           false);
    }
  }
  const bool status_differs = got.status != expected.status;
  if (r.failures == 0 && !status_differs) {
    r.message = what + "max " + number(r.max_fraction) + " of the tolerance, " +
                number(r.max_ulps) + " ulp where the ulp is the measure, over " +
                std::to_string(count) + " elements";
    return r;
  }
  r.outcome = Outcome::fail;
  std::string status_note;
  if (status_differs)
    status_note = "status word " + describe_status(got.status) + ", expected " +
                  describe_status(expected.status);
  if (r.failures == 0) {
    r.tensor = "status";
    r.expected = expected.status;
    r.got = got.status;
    r.failures = 1;
    r.message = what + status_note;
    return r;
  }
  set_element(r, worst.tensor, got.arrays.at(worst.tensor).shape, worst.flat);
  r.expected = worst.expected;
  r.got = worst.got;
  r.ulps = worst.ulps;
  r.message =
      what + element_string(r) + ": expected " + number(worst.expected) + ", got " +
      number(worst.got) + " (" + number(worst.ulps) + " ulp" +
      (worst.bitwise ? "; a copied element must be bitwise equal"
       : worst.exact ? "; the f32 products and sum are exact here, so only the output's rounding "
                       "is allowed: the reference's value"
                     : ", allowed " + number(worst.allowed_ulps)) +
      "); " + std::to_string(r.failures) + " of " + std::to_string(count) + " elements wrong" +
      (status_differs ? "; " + status_note : "");
  return r;
}

std::array<std::int64_t, kEdgeValueCount> count_edges(const Case& c, const ValueContext& ctx,
                                                      const CaseOutputs& expected) {
  std::array<std::int64_t, kEdgeValueCount> n{};
  const DType dtype = c.config.dtype;
  const double largest = dtype == DType::f16    ? 65504.0
                         : dtype == DType::bf16 ? 0x1.FEp127
                                                : 0x1.FFFFFEp127;
  const double smallest_normal = dtype == DType::f16 ? 0x1p-14 : 0x1p-126;
  auto add = [&n](EdgeValue e) { ++n[static_cast<std::size_t>(e)]; };
  for (const auto& [name, e] : expected.arrays) {
    const auto copied = ctx.copied.find(name);
    const auto exact = ctx.exact.find(name);
    for (std::int64_t i = 0; i < e.size(); ++i) {
      const double x = value_at(e, dtype, i);
      const auto k = static_cast<std::size_t>(i);
      if (exact != ctx.exact.end() && exact->second[k] == Exactness::tie) add(EdgeValue::tie);
      if (std::isinf(x)) add(EdgeValue::overflow);
      else if (std::fabs(x) >= 0.5 * largest) add(EdgeValue::near_max);
      if (x != 0 && std::fabs(x) < smallest_normal) add(EdgeValue::subnormal);
      if (x == 0 && std::signbit(x)) add(EdgeValue::signed_zero);
      if (std::isnan(x) && copied != ctx.copied.end() && copied->second[k])
        add(EdgeValue::nan_payload);
    }
  }
  return n;
}

CheckResult compare_bitwise(const Case& c, const CaseOutputs& a, const CaseOutputs& b,
                            CheckKind kind, const std::string& what) {
  CheckResult r;
  r.check = kind;
  std::int64_t count = 0;
  for (const std::string& name : schema_of(c.config.op).output_names()) {
    const auto a_it = a.arrays.find(name), b_it = b.arrays.find(name);
    if (a_it == a.arrays.end() || b_it == b.arrays.end() ||
        a_it->second.shape != b_it->second.shape) {
      r.outcome = Outcome::fail;
      r.failures = 1;
      r.tensor = name;
      r.message = what + ": " + name + " missing or of another shape";
      return r;
    }
    const npy::Array &x = a_it->second, &y = b_it->second;
    for (std::int64_t i = 0; i < x.size(); ++i, ++count) {
      if (same_bits(x, y, i)) continue;
      if (r.failures++ == 0) {
        set_element(r, name, x.shape, i);
        r.expected = value_at(x, c.config.dtype, i);
        r.got = value_at(y, c.config.dtype, i);
        r.ulps = std::fabs(r.got - r.expected) / ulp_of(c.config.dtype, r.expected);
      }
    }
  }
  if (r.failures == 0 && a.status == b.status) {
    r.message = what + ": bitwise equal over " + std::to_string(count) + " elements";
    return r;
  }
  r.outcome = Outcome::fail;
  if (r.failures == 0) {
    r.failures = 1;
    r.tensor = "status";
    r.message =
        what + ": status word " + describe_status(b.status) + " vs " + describe_status(a.status);
    return r;
  }
  r.message = what + ": " + element_string(r) + " is " + number(r.got) + " vs " +
              number(r.expected) + "; " + std::to_string(r.failures) + " of " +
              std::to_string(count) + " elements differ";
  return r;
}

}  // namespace mlarope::harness
