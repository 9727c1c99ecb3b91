// SPDX-License-Identifier: Apache-2.0
// The yarn_tables checks (yarn_check.h): guarded tables, the reference's exact values, and the
// bracket each rounded element must lie in.
#include "checks/yarn_check.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include "checks/compare.h"
#include "host_convert.h"
#include "io/case_file.h"
#include "mlarope/error.h"
#include "mlarope/validate.h"
#include "reference.h"

namespace mlarope::harness {
namespace {

using json = nlohmann::json;

constexpr std::int64_t kGuardBytes = 64;
constexpr unsigned char kPoison = 0xFF;   // NaN in f32, f16 and bf16
constexpr unsigned char kPoison2 = 0xFE;  // the second run's: NaN too, other bits

// One table (cos or sin) in a guarded buffer: guard, the rows (emb_dim elements, then the gap),
// guard; the first element at a 64-byte boundary, or one element past it.
class GuardedTable {
 public:
  GuardedTable(const YarnCase& c, unsigned char poison)
      : c_(c), element_(static_cast<std::int64_t>(dtype_size(c.dtype))),
        row_stride_(c.emb_dim + c.row_gap) {
    const std::int64_t data_bytes = c.rows * row_stride_ * element_;
    bytes_.assign(static_cast<std::size_t>(2 * kGuardBytes + data_bytes + 64 + element_), poison);
    const auto address = reinterpret_cast<std::uintptr_t>(bytes_.data() + kGuardBytes);
    start_ = kGuardBytes + static_cast<std::int64_t>((64 - address % 64) % 64) +
             (c.misalign ? element_ : 0);
  }

  TensorView view() {
    TensorView v;
    v.data = bytes_.data() + start_;
    v.dtype = c_.dtype;
    if (c_.rank4) {
      v.rank = 4;
      v.shape = {c_.rows, 1, 1, c_.emb_dim};
      v.strides = {row_stride_, c_.emb_dim, c_.emb_dim, 1};
    } else {
      v.rank = 2;
      v.shape[0] = c_.rows;
      v.shape[1] = c_.emb_dim;
      v.strides[0] = row_stride_;
      v.strides[1] = 1;
    }
    return v;
  }

  /// Byte offset of element k of row r.
  std::int64_t offset(std::int64_t r, std::int64_t k) const {
    return start_ + (r * row_stride_ + k) * element_;
  }
  double element(std::int64_t r, std::int64_t k) const {
    return load_as_double(bytes_.data() + offset(r, k), c_.dtype, 0);
  }
  bool unwritten(std::int64_t r, std::int64_t k, unsigned char poison) const {
    for (std::int64_t b = 0; b < element_; ++b)
      if (bytes_[static_cast<std::size_t>(offset(r, k) + b)] != poison) return false;
    return true;
  }
  /// True when byte i belongs to no element of the table.
  bool outside(std::int64_t i) const {
    if (i < start_) return true;
    const std::int64_t within = i - start_, row_bytes = row_stride_ * element_;
    if (within >= c_.rows * row_bytes) return true;
    return within % row_bytes >= c_.emb_dim * element_;
  }
  const std::vector<unsigned char>& bytes() const { return bytes_; }

 private:
  const YarnCase& c_;
  std::int64_t element_, row_stride_;
  std::vector<unsigned char> bytes_;
  std::int64_t start_ = 0;
};

struct Tables {
  GuardedTable cos, sin;
};

// Run the call on `backend` over tables poisoned with `poison`.
Tables run(const YarnCase& c, const Backend& backend, unsigned char poison) {
  Tables t{GuardedTable(c, poison), GuardedTable(c, poison)};
  YarnTablesCall call{c.params, c.offset, c.table_layout, t.cos.view(), t.sin.view()};
  backend.yarn_tables(call);
  return t;
}

CheckResult result(CheckKind kind) {
  CheckResult r;
  r.check = kind;
  return r;
}

void fail(CheckResult& r, const std::string& message) {
  r.outcome = Outcome::fail;
  if (r.message.empty()) r.message = message;
}

// Value and coverage of both tables against the reference's exact values.
void check_values(const YarnCase& c, const Tables& t, CheckResult& value, CheckResult& coverage,
                  UlpHistogram& histogram) {
  const std::vector<double> inverse_frequencies =
      reference::yarn_inverse_frequencies(c.params, c.emb_dim);
  const double m = reference::yarn_concentration(c.params);
  const std::int64_t half = c.emb_dim / 2;
  std::int64_t elements = 0;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    const double position = static_cast<double>(c.offset + r);
    for (std::int64_t k = 0; k < c.emb_dim; ++k) {
      const std::int64_t j = c.table_layout == PairLayout::half ? k % half : k / 2;
      const double angle = position * inverse_frequencies[static_cast<std::size_t>(j)];
      const double delta = yarn_element_delta(angle, m);
      for (int which = 0; which < 2; ++which) {
        const GuardedTable& table = which == 0 ? t.cos : t.sin;
        const char* name = which == 0 ? "cos" : "sin";
        ++elements;
        if (table.unwritten(r, k, kPoison)) {
          ++coverage.failures;
          fail(coverage, std::string("the backend left ") + name + "[" + std::to_string(r) + ", " +
                             std::to_string(k) + "] unwritten (still the poison bytes)");
          continue;
        }
        const double x = (which == 0 ? std::cos(angle) : std::sin(angle)) * m;
        const double got = table.element(r, k);
        const double low = round_to(c.dtype, x - delta), high = round_to(c.dtype, x + delta);
        const double half_ulp = 0.5 * ulp_of(c.dtype, x);
        const double fraction = std::fabs(got - x) / (delta + half_ulp);
        const double ulps = std::fabs(got - round_to(c.dtype, x)) / ulp_of(c.dtype, x);
        if (!(fraction <= value.max_fraction))
          value.max_fraction = std::isnan(fraction) ? INFINITY : fraction;
        if (delta <= half_ulp) {  // ulps measure the error only where the rounding dominates delta
          histogram.add(ulps);
          if (!(ulps <= value.max_ulps)) value.max_ulps = std::isnan(ulps) ? INFINITY : ulps;
        }
        if (got >= low && got <= high) continue;
        if (++value.failures > 1) continue;
        value.tensor = name;
        value.index = {r, k};
        value.token = r;
        value.dim = k;
        value.expected = x;
        value.got = got;
        value.ulps = ulps;
        char line[320];
        std::snprintf(
            line, sizeof line,
            "%s[%lld, %lld] (position %lld, pair %lld, angle %.17g): expected %.9g (rounded: "
            "between %.9g and %.9g), got %.9g (%.3g ulp)",
            name, static_cast<long long>(r), static_cast<long long>(k),
            static_cast<long long>(c.offset) + static_cast<long long>(r), static_cast<long long>(j),
            angle, x, low, high, got, ulps);
        value.message = line;
      }
    }
  }
  if (value.failures > 0) {
    value.outcome = Outcome::fail;
    value.message += "; " + std::to_string(value.failures) + " of " + std::to_string(elements) +
                     " elements wrong";
  } else {
    char line[160];
    std::snprintf(line, sizeof line, "max %.3g of the tolerance, %.3g ulp, over %lld elements",
                  value.max_fraction, value.max_ulps, static_cast<long long>(elements));
    value.message = line;
  }
  if (coverage.failures > 0)
    coverage.message += "; " + std::to_string(coverage.failures) + " element(s) unwritten";
  else coverage.message = "clean";
}

// Guard bytes and row gaps: still the poison.
void check_bounds(const Tables& t, CheckResult& bounds) {
  for (int which = 0; which < 2; ++which) {
    const GuardedTable& table = which == 0 ? t.cos : t.sin;
    const std::vector<unsigned char>& bytes = table.bytes();
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      if (!table.outside(static_cast<std::int64_t>(i)) || bytes[i] == kPoison) continue;
      ++bounds.failures;
      fail(bounds, std::string("the backend wrote byte ") + std::to_string(i) + " of the " +
                       (which == 0 ? "cos" : "sin") +
                       " buffer, outside the table's elements (a guard or a row gap)");
    }
  }
  if (bounds.failures > 0) bounds.message += "; " + std::to_string(bounds.failures) + " byte(s)";
  else bounds.message = "clean";
}

// The two runs' elements bitwise equal.
void check_determinism(const YarnCase& c, const Tables& a, const Tables& b,
                       CheckResult& determinism) {
  const std::int64_t element = static_cast<std::int64_t>(dtype_size(c.dtype));
  for (int which = 0; which < 2; ++which) {
    const GuardedTable& x = which == 0 ? a.cos : a.sin;
    const GuardedTable& y = which == 0 ? b.cos : b.sin;
    for (std::int64_t r = 0; r < c.rows; ++r)
      for (std::int64_t k = 0; k < c.emb_dim; ++k)
        if (std::memcmp(x.bytes().data() + x.offset(r, k), y.bytes().data() + y.offset(r, k),
                        static_cast<std::size_t>(element)) != 0) {
          ++determinism.failures;
          fail(determinism, std::string("a second run (other poison): ") +
                                (which == 0 ? "cos" : "sin") + "[" + std::to_string(r) + ", " +
                                std::to_string(k) + "] differs");
        }
  }
  if (determinism.failures > 0)
    determinism.message += "; " + std::to_string(determinism.failures) + " element(s)";
  else determinism.message = "a second run (other poison): bitwise equal";
}

}  // namespace

double yarn_element_delta(double angle, double concentration) {
  return 16.0 * std::numeric_limits<double>::epsilon() * std::fabs(concentration) *
         (std::fabs(angle) + 1.0);
}

std::string describe(const YarnCase& c) {
  const YarnParams& p = c.params;
  std::ostringstream s;
  s.precision(6);
  s << "yarn_tables " << to_string(c.dtype) << " R=" << c.rows << " emb=" << c.emb_dim << " "
    << to_string(c.table_layout) << " offset=" << c.offset << " base=" << p.rotary_base
    << " s=" << p.scaling_factor << " orig=" << p.original_max_position_embeddings
    << " beta=" << p.beta_fast << "/" << p.beta_slow << " mscale=" << p.mscale << "/"
    << p.mscale_all_dim;
  if (!std::isnan(p.concentration_override)) s << " m=" << p.concentration_override;
  if (c.rank4) s << " rank4";
  if (c.row_gap > 0) s << " gap=" << c.row_gap;
  if (c.misalign) s << " misaligned";
  return s.str();
}

json to_json(const YarnCase& c) {
  YarnTable table;
  table.params = c.params;
  table.rows = c.rows;
  table.offset = c.offset;
  return {{"yarn", to_json(table)},
          {"emb_dim", c.emb_dim},
          {"table_layout", to_string(c.table_layout)},
          {"dtype", to_string(c.dtype)},
          {"rank4", c.rank4},
          {"row_gap", c.row_gap},
          {"misalign", c.misalign}};
}

YarnCase yarn_case_from_json(const json& j) {
  try {
    YarnCase c;
    const YarnTable table = parse_yarn(j.at("yarn"), "yarn_case.json");
    c.params = table.params;
    c.rows = table.rows;
    c.offset = table.offset;
    c.emb_dim = j.at("emb_dim").get<std::int64_t>();
    c.table_layout = parse_pair_layout(j.at("table_layout").get<std::string>(), "table_layout");
    c.dtype = parse_dtype(j.at("dtype").get<std::string>(), "dtype");
    c.rank4 = j.value("rank4", false);
    c.row_gap = j.value("row_gap", std::int64_t{0});
    c.misalign = j.value("misalign", false);
    if (c.row_gap < 0) throw Error("yarn_case.json: row_gap must be >= 0");
    return c;
  } catch (const json::exception& e) {
    throw Error(std::string("yarn_case.json: ") + e.what());
  }
}

CheckReport check_yarn(const YarnCase& c, const Backend& backend) {
  CheckReport report;
  if (!backend.yarn_tables) {
    report.unsupported = "yarn_tables: backend " + backend.name + " has no yarn_tables";
    return report;
  }
  {  // an invalid case is the generator's fault, not the backend's
    GuardedTable cos(c, kPoison), sin(c, kPoison);
    validate(YarnTablesCall{c.params, c.offset, c.table_layout, cos.view(), sin.view()});
  }
  CheckResult value = result(CheckKind::value), coverage = result(CheckKind::coverage),
              bounds = result(CheckKind::bounds), determinism = result(CheckKind::determinism);
  try {
    const Tables first = run(c, backend, kPoison);
    check_values(c, first, value, coverage, report.histogram);
    check_bounds(first, bounds);
    const Tables second = run(c, backend, kPoison2);
    check_determinism(c, first, second, determinism);
  } catch (const Unsupported& e) {
    report.unsupported = std::string("yarn_tables: ") + e.what();
    return report;
  } catch (const std::exception& e) {
    for (CheckResult* r : {&value, &coverage, &bounds, &determinism})
      if (r->message.empty()) fail(*r, std::string("the backend threw: ") + e.what());
  }
  report.tolerance_fraction = value.max_fraction;
  report.results = {value, coverage, bounds, determinism};
  return report;
}

}  // namespace mlarope::harness
