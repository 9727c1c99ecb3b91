// SPDX-License-Identifier: Apache-2.0
// The checks that need no reference: round trip (forward, then inverse with swapped layouts,
// gives (c^2 + s^2) x = m^2 x for unit tables) and adjoint (<f(x), y> == <x, f^T(y)>).
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "checks/check_context.h"
#include "checks/compare.h"
#include "checks/tolerance.h"
#include "mlarope/op_schema.h"
#include "positions.h"

namespace mlarope::harness::detail {
namespace {

constexpr double kEpsF32 = std::numeric_limits<float>::epsilon();

struct Slots {
  std::int64_t u, v;
};
Slots slots(PairLayout layout, std::int64_t i, std::int64_t d) {
  return layout == PairLayout::half ? Slots{i, i + d / 2} : Slots{2 * i, 2 * i + 1};
}

std::string number(double x) {
  std::ostringstream s;
  s.precision(9);
  s << x;
  return s.str();
}

double table_at(const Case& c, const char* name, std::int64_t row, std::int64_t k) {
  return value_at(c.arrays.at(name), c.config.table_dtype, row * c.config.emb_dim + k);
}

// Why the table is not unit ("" when c[tu] == c[tv] and s[tu] == s[tv] in every row).
std::string non_unit_reason(const Case& c) {
  const std::int64_t d = c.config.emb_dim, rows = c.arrays.at("cos").shape[0];
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < d / 2; ++i) {
      const Slots t = slots(c.config.table_layout, i, d);
      for (const char* name : {"cos", "sin"})
        if (table_at(c, name, r, t.u) != table_at(c, name, r, t.v))
          return std::string(name) + " row " + std::to_string(r) + " pair " + std::to_string(i) +
                 ": " + number(table_at(c, name, r, t.u)) + " vs " +
                 number(table_at(c, name, r, t.v));
    }
  return "";
}

// Compares z (the round trip of x through y) with (c^2 + s^2) x, element by element.
class RoundTripJudge {
 public:
  RoundTripJudge(const Case& c, const npy::Array& x, const npy::Array& y, const npy::Array& z)
      : c_(c), x_(x), y_(y), z_(z), dtype_(c.config.dtype) {}

  CheckResult judge() {
    const CaseConfig& k = c_.config;
    const reference::RowMap map = row_map(c_);
    const std::int64_t heads = x_.shape[x_.shape.size() - 2], width = x_.shape.back();
    for (std::size_t row = 0; row < map.freq_row.size(); ++row)
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t base = (static_cast<std::int64_t>(row) * heads + h) * width;
        const bool pass = map.freq_row[row] == reference::RowMap::kPassThrough;
        for (std::int64_t d = 0; d < (pass ? width : k.nope_dim); ++d) exact(base + d);
        if (!pass)
          for (std::int64_t i = 0; i < k.emb_dim / 2; ++i)
            pair(base + k.nope_dim, map.freq_row[row], i);
      }
    return result();
  }

 private:
  void exact(std::int64_t i) {
    ++count_;
    const double xv = value_at(x_, dtype_, i), zv = value_at(z_, dtype_, i);
    if (std::memcmp(&x_.bytes[i * es()], &z_.bytes[i * es()], es()) != 0)
      fail(i, xv, zv, INFINITY, "a copied element must come back bitwise");
  }

  void pair(std::int64_t base, std::int64_t freq_row, std::int64_t i) {
    const CaseConfig& k = c_.config;
    // rope: x and z in in_layout, y in out_layout; rope_backward the other way round.
    const bool forward = k.op == Op::rope;
    const Slots in = slots(forward ? k.in_layout : k.out_layout, i, k.emb_dim);
    const Slots out = slots(forward ? k.out_layout : k.in_layout, i, k.emb_dim);
    const Slots t = slots(k.table_layout, i, k.emb_dim);
    const double cu = table_at(c_, "cos", freq_row, t.u), su = table_at(c_, "sin", freq_row, t.u);
    const double n = cu * cu + su * su;
    n_min_ = std::min(n_min_, n);
    n_max_ = std::max(n_max_, n);
    const double xu = value_at(x_, dtype_, base + in.u), xv = value_at(x_, dtype_, base + in.v);
    const double y_ulps = ulp_of(dtype_, value_at(y_, dtype_, base + out.u)) +
                          ulp_of(dtype_, value_at(y_, dtype_, base + out.v));
    const double carried =
        2 * std::sqrt(n) * y_ulps + 16 * kEpsF32 * n * (std::fabs(xu) + std::fabs(xv));
    for (std::int64_t slot : {in.u, in.v}) {
      ++count_;
      const double target = n * value_at(x_, dtype_, base + slot);
      const double got = value_at(z_, dtype_, base + slot);
      const double allowed = 2 * ulp_of(dtype_, target) + carried;
      const double err = std::fabs(got - target);
      if (got == target || err <= allowed) continue;
      fail(base + slot, target, got, std::isnan(err) ? INFINITY : err / allowed,
           "allowed " + number(allowed / ulp_of(dtype_, target)) + " ulp");
    }
  }

  void fail(std::int64_t i, double expected, double got, double ratio, const std::string& note) {
    ++failures_;
    if (ratio <= worst_ratio_) return;
    worst_ratio_ = ratio;
    worst_ = i;
    worst_expected_ = expected;
    worst_got_ = got;
    worst_note_ = note;
  }

  CheckResult result() const {
    CheckResult r;
    r.check = CheckKind::round_trip;
    const std::string n_range =
        count_ && n_max_ >= n_min_
            ? "; c^2 + s^2 (= m^2) in [" + number(n_min_) + ", " + number(n_max_) + "]"
            : "";
    if (failures_ == 0) {
      r.message = "inverse(forward(x)) == (c^2 + s^2) x over " + std::to_string(count_) +
                  " elements" + n_range;
      return r;
    }
    r.outcome = Outcome::fail;
    r.failures = failures_;
    set_element(r, rope_output(c_.config.op), z_.shape, worst_);
    r.expected = worst_expected_;
    r.got = worst_got_;
    r.ulps = std::fabs(worst_got_ - worst_expected_) / ulp_of(dtype_, worst_expected_);
    r.message = "inverse(forward(x)) at " + element_string(r) +
                ": expected (c^2 + s^2) x = " + number(worst_expected_) + ", got " +
                number(worst_got_) + " (" + number(r.ulps) + " ulp, " + worst_note_ + "); " +
                std::to_string(failures_) + " of " + std::to_string(count_) + " elements wrong" +
                n_range;
    return r;
  }

  std::size_t es() const { return npy::dtype_size(x_.dtype); }

  const Case& c_;
  const npy::Array &x_, &y_, &z_;
  DType dtype_;
  std::int64_t count_ = 0, failures_ = 0, worst_ = 0;
  double worst_ratio_ = -1, worst_expected_ = 0, worst_got_ = 0;
  double n_min_ = std::numeric_limits<double>::infinity(),
         n_max_ = -std::numeric_limits<double>::infinity();
  std::string worst_note_;
};

// <a, b> and sum |a b| over two arrays of the same size.
struct Dot {
  double sum = 0, magnitude = 0;
};
Dot dot(const npy::Array& a, const npy::Array& b, DType dtype) {
  Dot d;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    const double p = value_at(a, dtype, i) * value_at(b, dtype, i);
    d.sum += p;
    d.magnitude += std::fabs(p);
  }
  return d;
}

// sum |w_i| * (ulp(z_i) + terms_i): how far <z, w> may be from exact.
double allowance(const npy::Array& z, const npy::Array& w, const std::vector<double>& terms,
                 DType dtype) {
  double a = 0;
  for (std::int64_t i = 0; i < z.size(); ++i)
    a += std::fabs(value_at(w, dtype, i)) * (ulp_of(dtype, value_at(z, dtype, i)) + terms[i]);
  return a;
}

// One side of an adjoint identity: an input the case has, or random data.
npy::Array input_or_random(const Case& c, const char* name, bool own,
                           std::vector<std::int64_t> shape, std::uint64_t seed) {
  if (own) return c.arrays.at(name);
  npy::Array like = npy::make(storage_dtype(c.config.dtype), std::move(shape));
  return random_like(like, c.config.dtype, seed);
}

std::vector<std::int64_t> with_last(std::vector<std::int64_t> shape, std::int64_t heads,
                                    std::int64_t last) {
  shape[shape.size() - 2] = heads;
  shape.back() = last;
  return shape;
}

CheckResult adjoint_result(double lhs, double rhs, double tolerance, const std::string& what) {
  CheckResult r;
  r.check = CheckKind::adjoint;
  r.expected = lhs;
  r.got = rhs;
  const double diff = std::fabs(lhs - rhs);
  r.message = what + ": " + number(lhs) + " vs " + number(rhs) + ", difference " + number(diff) +
              " (allowed " + number(tolerance) + ")";
  if (!(diff <= tolerance)) {
    r.outcome = Outcome::fail;
    r.failures = 1;
  }
  return r;
}

// Output `name` of the op of `c`: from the primary run when the case is that op, else a new run.
// `unsupported` says why the backend declined the side run ("" when it ran it).
bool side_output(CheckContext& ctx, const Case& side, const char* label, CaseOutputs& out,
                 std::string& error, std::string& unsupported) {
  if (side.config.op == ctx.kase().config.op) {
    out = ctx.primary().outputs;
    error = ctx.primary().error;
  } else {
    RunResult r = ctx.run(side, side.config.in_place, Fill::poison_a, label);
    out = std::move(r.outputs);
    error = r.error;
    unsupported = r.unsupported;
  }
  return error.empty() && unsupported.empty();
}

// The adjoint check's result when a side run did not run.
CheckResult side_failed(const std::string& error, const std::string& unsupported) {
  if (!unsupported.empty())
    return skipped(CheckKind::adjoint,
                   "not applicable: the backend declines the other direction (" + unsupported +
                       ")");
  return failed(CheckKind::adjoint, "the backend threw: " + error);
}

CheckResult adjoint_rope(CheckContext& ctx) {
  const Case& c = ctx.kase();
  const bool forward = c.config.op == Op::rope;
  const npy::Array& own = c.arrays.at(rope_input(c.config.op));
  Case f = c, b = c;
  f.config.op = Op::rope;
  b.config.op = Op::rope_backward;
  f.arrays.erase("grad_out");
  b.arrays.erase("t");
  f.arrays["t"] = input_or_random(c, "t", forward, own.shape, ctx.options().seed * 2 + 1);
  b.arrays["grad_out"] =
      input_or_random(c, "grad_out", !forward, own.shape, ctx.options().seed * 2 + 2);
  CaseOutputs fo, bo;
  std::string error;
  std::string unsupported;
  if (!side_output(ctx, f, "the adjoint's rope run", fo, error, unsupported) ||
      !side_output(ctx, b, "the adjoint's rope_backward run", bo, error, unsupported))
    return side_failed(error, unsupported);
  const DType dt = c.config.dtype;
  const npy::Array &x = f.arrays.at("t"), &y = b.arrays.at("grad_out");
  const npy::Array &fx = fo.arrays.at("out"), &by = bo.arrays.at("grad_t");
  const Dot lhs = dot(fx, y, dt), rhs = dot(x, by, dt);
  const double tol = allowance(fx, y, f32_error_terms(f).at("out"), dt) +
                     allowance(by, x, f32_error_terms(b).at("grad_t"), dt) +
                     1e-12 * (lhs.magnitude + rhs.magnitude);
  return adjoint_result(lhs.sum, rhs.sum, tol, "<rope(x), y> vs <x, rope_backward(y)>");
}

CheckResult adjoint_kv(CheckContext& ctx) {
  const Case& c = ctx.kase();
  const CaseConfig& k = c.config;
  const bool forward = k.op == Op::kv_split;
  const auto& rows = c.arrays.at(forward ? "kv" : "grad_key").shape;
  const std::int64_t heads = rows[rows.size() - 2];
  const std::uint64_t s = ctx.options().seed * 4;
  Case f = c, b = c;
  f.config.op = Op::kv_split;
  b.config.op = Op::kv_split_backward;
  for (const char* n : {"grad_key", "grad_value"}) f.arrays.erase(n);
  for (const char* n : {"kv", "k_pe"}) b.arrays.erase(n);
  f.arrays["kv"] =
      input_or_random(c, "kv", forward, with_last(rows, heads, k.k_dim + k.v_dim), s + 1);
  f.arrays["k_pe"] = input_or_random(c, "k_pe", forward, with_last(rows, 1, k.emb_dim), s + 2);
  b.arrays["grad_key"] =
      input_or_random(c, "grad_key", !forward, with_last(rows, heads, k.k_dim + k.emb_dim), s + 3);
  b.arrays["grad_value"] =
      input_or_random(c, "grad_value", !forward, with_last(rows, heads, k.v_dim), s + 4);
  CaseOutputs fo, bo;
  std::string error;
  std::string unsupported;
  if (!side_output(ctx, f, "the adjoint's kv_split run", fo, error, unsupported) ||
      !side_output(ctx, b, "the adjoint's kv_split_backward run", bo, error, unsupported))
    return side_failed(error, unsupported);
  const DType dt = k.dtype;
  const auto ft = f32_error_terms(f), bt = f32_error_terms(b);
  const npy::Array &gk = b.arrays.at("grad_key"), &gv = b.arrays.at("grad_value");
  const npy::Array &kv = f.arrays.at("kv"), &k_pe = f.arrays.at("k_pe");
  const npy::Array &key = fo.arrays.at("key"), &value = fo.arrays.at("value");
  const npy::Array &g_kv = bo.arrays.at("grad_kv"), &g_k_pe = bo.arrays.at("grad_k_pe");
  const Dot l1 = dot(key, gk, dt), l2 = dot(value, gv, dt), r1 = dot(kv, g_kv, dt),
            r2 = dot(k_pe, g_k_pe, dt);
  const double tol =
      allowance(key, gk, ft.at("key"), dt) + allowance(value, gv, ft.at("value"), dt) +
      allowance(g_kv, kv, bt.at("grad_kv"), dt) + allowance(g_k_pe, k_pe, bt.at("grad_k_pe"), dt) +
      1e-12 * (l1.magnitude + l2.magnitude + r1.magnitude + r2.magnitude);
  return adjoint_result(
      l1.sum + l2.sum, r1.sum + r2.sum, tol,
      "<kv_split(kv, k_pe), (gk, gv)> vs <(kv, k_pe), kv_split_backward(gk, gv)>");
}

}  // namespace

// Why the case's data cannot go through an inverse or an inner product: "" when its
// activations and the reference's outputs are all finite (edge-value cases hold infinities,
// results rounded past the largest finite value, and copied NaNs).
std::string non_finite_reason(CheckContext& ctx) {
  const Case& c = ctx.kase();
  auto finite = [&c](const npy::Array& a) {
    for (std::int64_t i = 0; i < a.size(); ++i)
      if (!std::isfinite(value_at(a, c.config.dtype, i))) return false;
    return true;
  };
  for (const std::string& name : all_input_names()) {
    if (c.arrays.count(name) && !finite(c.arrays.at(name)))
      return name + " holds infinities or NaNs";
  }
  for (const auto& [name, a] : ctx.expected().arrays)
    if (!finite(a)) return "the reference's " + name + " holds infinities or NaNs";
  return "";
}

CheckResult not_finite(CheckKind kind, const std::string& reason) {
  return skipped(kind,
                 "not applicable: " + reason + " (no inverse or inner product of them to judge)");
}

CheckResult check_round_trip(CheckContext& ctx) {
  const Case& c = ctx.kase();
  const CaseConfig& k = c.config;
  if (!is_rope_family(k.op))
    return skipped(CheckKind::round_trip,
                   std::string(to_string(k.op)) +
                       " has no inverse of the same op (the adjoint check covers it)");
  if (const std::string why = non_finite_reason(ctx); !why.empty())
    return not_finite(CheckKind::round_trip, why);
  const std::string reason = non_unit_reason(c);
  if (!reason.empty())
    return skipped(CheckKind::round_trip, "the table is not unit (" + reason +
                                              "): only unit tables invert with swapped layouts");
  const RunResult& first = ctx.primary();
  if (!first.error.empty())
    return failed(CheckKind::round_trip, "the forward call threw: " + first.error);
  Case inverse = c;
  inverse.config.inverse = !k.inverse;
  std::swap(inverse.config.in_layout, inverse.config.out_layout);
  inverse.arrays[rope_input(k.op)] = first.outputs.arrays.at(rope_output(k.op));
  const RunResult second =
      ctx.run(inverse, k.in_place, Fill::poison_a, "the round trip's inverse run");
  if (!second.unsupported.empty())
    return skipped(CheckKind::round_trip,
                   "not applicable: the backend declines the inverse (" + second.unsupported + ")");
  if (!second.error.empty())
    return failed(CheckKind::round_trip, "the inverse call threw: " + second.error);
  return RoundTripJudge(c, c.arrays.at(rope_input(k.op)),
                        first.outputs.arrays.at(rope_output(k.op)),
                        second.outputs.arrays.at(rope_output(k.op)))
      .judge();
}

CheckResult check_adjoint(CheckContext& ctx) {
  if (const std::string why = non_finite_reason(ctx); !why.empty())
    return not_finite(CheckKind::adjoint, why);
  return is_rope_family(ctx.kase().config.op) ? adjoint_rope(ctx) : adjoint_kv(ctx);
}

}  // namespace mlarope::harness::detail
