// SPDX-License-Identifier: Apache-2.0
#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "compare.h"
#include "dashboard.h"
#include "history.h"
#include "mlarope/error.h"
#include "svg.h"

namespace mlarope::reports {
namespace {

using nlohmann::json;

double to_ms(double value, const std::string& unit) {
  if (unit == "ns") return value * 1e-6;
  if (unit == "us") return value * 1e-3;
  if (unit == "s") return value * 1e3;
  return value;
}

double number_or(const json& j, const char* key, double fallback) {
  return j.contains(key) && j.at(key).is_number() ? j.at(key).get<double>() : fallback;
}

// Results grouped as op -> shape -> backend -> result, in a stable order.
using Grouped = std::map<std::string, std::map<std::string, std::map<std::string, BenchResult>>>;

// One result per key: the median time, GB/s and floor fraction of its repetitions (the
// model's figures are the same in every repetition).
std::vector<BenchResult> medians(const std::vector<BenchResult>& results) {
  const std::map<std::string, KeySummary> summaries = summarize(results);
  std::vector<BenchResult> out;
  std::set<std::string> seen;
  for (const BenchResult& r : results) {
    if (!seen.insert(r.key()).second) continue;
    BenchResult m = r;
    const KeySummary& s = summaries.at(r.key());
    m.time_ms = s.time_ms;
    m.gbps = s.gbps;
    m.floor_fraction = s.floor_fraction;
    out.push_back(m);
  }
  return out;
}

Grouped group(const std::vector<BenchResult>& results) {
  Grouped g;
  for (const BenchResult& r : medians(results)) g[r.op][r.shape][r.backend] = r;
  return g;
}

std::vector<std::string> backends_of(const std::vector<BenchResult>& results) {
  std::set<std::string> names;
  for (const BenchResult& r : results) names.insert(r.backend);
  return {names.begin(), names.end()};
}

// "counts" of a fuzz.json: category -> (value -> count), where present.
std::vector<std::pair<std::string, std::vector<std::pair<std::string, double>>>> fuzz_counts(
    const json& j) {
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, double>>>> out;
  if (!j.contains("counts") || !j["counts"].is_object()) return out;
  for (const auto& [category, values] : j["counts"].items()) {
    if (!values.is_object() || category == "matrix") continue;
    std::vector<std::pair<std::string, double>> rows;
    for (const auto& [value, count] : values.items())
      if (count.is_number()) rows.push_back({value, count.get<double>()});
    out.push_back({category, rows});
  }
  return out;
}

std::string fuzz_headline(const FuzzReport& f) {
  const json& j = f.json;
  std::ostringstream s;
  s << f.where << ": " << static_cast<long long>(number_or(j, "cases", 0)) << " cases";
  if (j.contains("cases_per_second"))
    s << " (" << fixed(number_or(j, "cases_per_second", 0), 0) << " cases/s)";
  if (j.contains("backend") && j["backend"].is_string())
    s << " on " << j["backend"].get<std::string>();
  const std::size_t failures =
      j.contains("failures") && j["failures"].is_array() ? j["failures"].size() : 0;
  s << ", " << failures << " failure" << (failures == 1 ? "" : "s");
  return s.str();
}

// A merged sharded run: the spread of the shards' rates, and each shard when there are few.
std::vector<std::string> fuzz_shards(const json& j) {
  std::vector<std::string> lines;
  if (!j.contains("shards") || !j["shards"].is_array() || j["shards"].empty()) return lines;
  std::vector<double> rates;
  for (const json& s : j["shards"]) rates.push_back(number_or(s, "cases_per_second", 0));
  std::sort(rates.begin(), rates.end());
  lines.push_back(std::to_string(rates.size()) + " shards, cases/s per shard: min " +
                  fixed(rates.front(), 0) + ", median " + fixed(rates[rates.size() / 2], 0) +
                  ", max " + fixed(rates.back(), 0));
  if (j["shards"].size() <= 16)
    for (const json& s : j["shards"])
      lines.push_back("shard " + std::to_string(s.value("index", 0)) + ": " +
                      std::to_string(s.value("cases", 0LL)) + " cases, " +
                      fixed(number_or(s, "cases_per_second", 0), 0) + " cases/s, " +
                      std::to_string(s.value("failing_cases", 0LL)) + " failing");
  return lines;
}

// Several runs (shards) together: cases, failures, and their rates summed (shards run at once).
std::string fuzz_total(const std::vector<FuzzReport>& fuzz) {
  double cases = 0, rate = 0, failing = 0;
  for (const FuzzReport& f : fuzz) {
    cases += number_or(f.json, "cases", 0);
    rate += number_or(f.json, "cases_per_second", 0);
    failing += number_or(f.json, "failing_cases", 0);
  }
  std::ostringstream s;
  s << "all " << fuzz.size() << " runs: " << static_cast<long long>(cases) << " cases, "
    << static_cast<long long>(failing) << " failing, " << fixed(rate, 0) << " cases/s together";
  return s.str();
}

// The worst error as a fraction of the tolerance, per op/dtype ("" when the run has none).
std::string fuzz_fractions(const json& j) {
  if (!j.contains("tolerance_fractions") || !j["tolerance_fractions"].is_object() ||
      j["tolerance_fractions"].empty())
    return "";
  std::string line = "worst error / tolerance (1 = at the limit):";
  for (const auto& [key, h] : j["tolerance_fractions"].items())
    line += " " + key + " " +
            (h.contains("max") && h["max"].is_number() ? fixed(h["max"].get<double>(), 2) : "inf") +
            ",";
  line.pop_back();
  return line;
}

// One line per failure: what failed and the command that replays it.
std::vector<std::string> fuzz_failures(const json& j) {
  std::vector<std::string> lines;
  if (!j.contains("failures") || !j["failures"].is_array()) return lines;
  for (const json& f : j["failures"]) {
    std::string line;
    for (const char* key : {"check", "op", "message"})
      if (f.contains(key) && f[key].is_string())
        line += (line.empty() ? "" : ": ") + f[key].get<std::string>();
    for (const char* key : {"replay", "command"})
      if (f.contains(key) && f[key].is_string())
        line += "  replay: `" + f[key].get<std::string>() + "`";
    lines.push_back(line.empty() ? f.dump() : line);
  }
  return lines;
}

// What a backend declined in a fuzz.json ("support": a plugin's unsupported calls): a line
// of totals, then one per reason; empty when the run declined nothing.
std::vector<std::string> fuzz_support(const json& j) {
  std::vector<std::string> lines;
  if (!j.contains("support") || !j["support"].is_object()) return lines;
  const json& s = j["support"];
  const auto number = [&](const char* key) {
    return s.contains(key) && s[key].is_number() ? s[key].get<long long>() : 0LL;
  };
  if (number("declined_cases") == 0) return lines;
  std::ostringstream head;
  head << "supported: " << number("supported_combinations") << " of " << number("combinations")
       << " flag combinations seen (" << number("partly_supported_combinations")
       << " more in part); " << number("declined_cases") << " cases not supported (not failures):";
  lines.push_back(head.str());
  if (s.contains("not_supported") && s["not_supported"].is_object())
    for (const auto& [reason, n] : s["not_supported"].items())
      lines.push_back(reason + " (" + std::to_string(n.is_number() ? n.get<long long>() : 0LL) +
                      ")");
  return lines;
}

// Where a histogram bucket label ("0", "(0.5,1]", ">16", "non-finite") sorts: by its lower bound.
double bucket_order(const std::string& label) {
  if (label == "non-finite") return 1e300;
  if (label.empty()) return 0;
  if (label[0] == '>') return std::atof(label.c_str() + 1) + 0.5;
  if (label[0] == '(' || label[0] == '[') return std::atof(label.c_str() + 1) + 0.25;
  return std::atof(label.c_str());
}

// Histograms of a fuzz.json ("ulp_histograms": {dtype: {label: count}} or {"edges", "counts"};
// "tolerance_fractions": {op/dtype: {"max", "buckets"}}).
std::vector<std::pair<std::string, std::vector<std::pair<std::string, double>>>> fuzz_histograms(
    const json& j, const char* key_wanted = "ulp_histograms") {
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, double>>>> out;
  const bool ulps = std::string(key_wanted) == "ulp_histograms";
  const char* key = ulps && !j.contains("ulp_histograms") ? "ulp_histogram" : key_wanted;
  if (!j.contains(key) || !j[key].is_object()) return out;
  for (const auto& [dtype, h] : j[key].items()) {
    std::vector<std::pair<std::string, double>> bins;
    if (h.is_object() && h.contains("counts") && h["counts"].is_array()) {
      const json labels = h.contains("labels") ? h["labels"] : h.value("edges", json::array());
      for (std::size_t i = 0; i < h["counts"].size(); ++i)
        bins.push_back({i < labels.size() ? (labels[i].is_string() ? labels[i].get<std::string>()
                                                                   : labels[i].dump())
                                          : std::to_string(i),
                        h["counts"][i].get<double>()});
    } else if (h.is_object()) {
      const json& buckets = h.contains("buckets") && h["buckets"].is_object() ? h["buckets"] : h;
      for (const auto& [label, count] : buckets.items())
        if (count.is_number()) bins.push_back({label, count.get<double>()});
      std::sort(bins.begin(), bins.end(), [](const auto& a, const auto& b) {
        return bucket_order(a.first) < bucket_order(b.first);
      });
    }
    out.push_back({dtype, bins});
  }
  return out;
}

// The joint coverage matrix of fuzz.json ("op;layout;dtype;triple;cp" -> cases) as a table:
// rows op/layout/dtype, columns layout triple, cells cases summed over CP sizes (the CP split
// in the cell's tooltip), then a row of cases per CP size.
std::string coverage_matrix_html(const json& j) {
  if (!j.contains("counts") || !j["counts"].contains("matrix")) return "";
  std::map<std::string, std::map<std::string, std::map<std::string, long long>>> cells;
  std::set<std::string> triples;
  for (const auto& [key, count] : j["counts"]["matrix"].items()) {
    std::vector<std::string> parts;
    std::stringstream k(key);
    for (std::string part; std::getline(k, part, ';');) parts.push_back(part);
    if (parts.size() != 5 || !count.is_number()) continue;
    cells[parts[0] + " " + parts[1] + " " + parts[2]][parts[3]][parts[4]] += count.get<long long>();
    triples.insert(parts[3]);
  }
  std::ostringstream h;
  h << "<h3>Coverage matrix: cases per op, layout, dtype (rows) and layout triple in/out/table "
       "(columns); hover a cell for its split by CP size</h3><table><tr><th>op layout dtype</th>";
  for (const std::string& t : triples) h << "<th>" << escape(t) << "</th>";
  h << "</tr>\n";
  for (const auto& [row, by_triple] : cells) {
    h << "<tr><td>" << escape(row) << "</td>";
    for (const std::string& t : triples) {
      long long total = 0;
      std::string split;
      const auto it = by_triple.find(t);
      if (it != by_triple.end())
        for (const auto& [cp, n] : it->second)
          total += n, split += "cp " + cp + ": " + std::to_string(n) + "  ";
      h << "<td title='" << escape(split) << "'" << (total == 0 ? " style='background:#fdd'" : "")
        << ">" << total << "</td>";
    }
    h << "</tr>\n";
  }
  h << "</table>\n";
  return h.str();
}

// Pass / fail / skip of each check.
std::string checks_html(const json& j) {
  if (!j.contains("checks") || !j["checks"].is_object()) return "";
  std::ostringstream h;
  h << "<h3>Checks</h3><table><tr><th>check</th><th>pass</th><th>fail</th><th>skip</th></tr>";
  for (const auto& [name, c] : j["checks"].items())
    h << "<tr><td>" << escape(name) << "</td><td>" << c.value("pass", 0) << "</td><td"
      << (c.value("fail", 0) ? " class='fail'" : "") << ">" << c.value("fail", 0) << "</td><td>"
      << c.value("skip", 0) << "</td></tr>";
  h << "</table>\n";
  return h.str();
}

}  // namespace

std::vector<BenchResult> parse_benchmarks(const json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("benchmarks") || !j["benchmarks"].is_array())
    throw Error(where + ": not Google Benchmark JSON (no 'benchmarks' array)");
  std::vector<BenchResult> results;
  for (const json& b : j["benchmarks"]) {
    if (b.value("run_type", "iteration") != "iteration" || !b.contains("name")) continue;
    if (b.value("error_occurred", false)) continue;  // skipped with an error: nothing was timed
    std::vector<std::string> parts;
    std::stringstream name(b["name"].get<std::string>());
    for (std::string part; std::getline(name, part, '/');) parts.push_back(part);
    while (!parts.empty() && (parts.back() == "real_time" || parts.back() == "manual_time"))
      parts.pop_back();
    if (parts.size() < 3) continue;  // not an mlarope_bench name
    BenchResult r;
    r.op = parts[0];
    r.backend = parts[1];
    for (std::size_t i = 2; i < parts.size(); ++i) r.shape += (i > 2 ? "/" : "") + parts[i];
    r.time_ms = to_ms(number_or(b, "real_time", 0), b.value("time_unit", "ns"));
    r.gbps = number_or(b, "GBps", 0);
    r.floor_fraction = number_or(b, "floor_fraction", 0);
    r.bytes = number_or(b, "bytes", 0);
    r.model_sector_efficiency = number_or(b, "model_sector_efficiency", NAN);
    r.model_dram_fraction = number_or(b, "model_dram_fraction", NAN);
    r.model_floor_fraction = number_or(b, "model_floor_fraction", NAN);
    r.model_time_us = number_or(b, "model_time_us", NAN);
    r.model_blocks_per_sm = number_or(b, "model_blocks_per_sm", NAN);
    r.model_waves = number_or(b, "model_waves", NAN);
    r.model_kib_in_flight = number_or(b, "model_KiB_in_flight_per_sm", NAN);
    r.model_bandwidth_drawn = number_or(b, "model_bandwidth_drawn", NAN);
    r.model_bandwidth_available = number_or(b, "model_bandwidth_available", NAN);
    results.push_back(r);
  }
  return results;
}

// The gate's section: what was compared, its verdict, the table of keys.
static std::string gate_markdown(const GateResult& gate) {
  std::ostringstream md;
  md << "## Gate: " << gate.title << "\n\n";
  if (!gate.applied) return md.str() + gate.note + "\n\n";
  const Verdict v = gate.comparison.overall();
  md << (v == Verdict::same     ? "**pass**"
         : v == Verdict::slower ? "**FAIL** (SLOWER)"
                                : "**UNDECIDED** (UNKNOWN)")
     << "\n\n"
     << comparison_markdown(gate.comparison);
  if (!gate.note.empty()) md << "\n" << gate.note << "\n";
  return md.str() + "\n";
}

static std::string gate_html(const GateResult& gate) {
  std::ostringstream h;
  h << "<h2>Gate: " << escape(gate.title) << "</h2>";
  if (!gate.applied) return h.str() + "<p>" + escape(gate.note) + "</p>\n";
  const Verdict v = gate.comparison.overall();
  h << "<p class='" << (v == Verdict::same ? "pass" : "fail") << "'>"
    << (v == Verdict::same     ? "pass"
        : v == Verdict::slower ? "FAIL (SLOWER)"
                               : "UNDECIDED (UNKNOWN)")
    << "</p>"
    << "<table><tr><th>key</th><th>base median</th><th>change "
       "median</th><th>change</th><th>interval</th>"
       "<th>p slower</th><th>verdict</th></tr>\n";
  for (const KeyComparison& k : gate.comparison.keys) {
    const bool bad = k.verdict == Verdict::slower || k.verdict == Verdict::unknown;
    h << "<tr><td>" << escape(k.key) << "</td><td>"
      << (k.base.empty() ? "" : fixed(k.base_median, 4)) << "</td><td>"
      << (k.change.empty() ? "" : fixed(k.change_median, 4)) << "</td><td>"
      << (k.tested ? fixed(100 * k.change_estimate.estimate, 1) + "%" : "") << "</td><td>"
      << (k.tested ? "[" + fixed(100 * k.change_estimate.lower, 1) + "%, " +
                         fixed(100 * k.change_estimate.upper, 1) + "%]"
                   : "")
      << "</td><td>" << (k.tested ? escape(std::to_string(k.p_slower)) : "") << "</td><td"
      << (bad ? " class='fail'" : "") << ">" << to_string(k.verdict)
      << (k.confirmed ? " (repeated)" : "") << (k.reason.empty() ? "" : ": " + escape(k.reason))
      << "</td></tr>\n";
  }
  h << "</table>";
  if (!gate.note.empty()) h << "<p>" << escape(gate.note) << "</p>";
  return h.str() + "\n";
}

// `x` with `digits` decimals and `unit`, or "" when it is NaN (a figure a run did not have).
static std::string maybe(double x, int digits, const char* unit = "") {
  return std::isnan(x) ? "" : fixed(x, digits) + unit;
}

// "drawn / available" shares of the copy bandwidth, or "" where the run has no such figures.
static std::string bandwidth_shares(const BenchResult& r) {
  if (std::isnan(r.model_bandwidth_drawn) || std::isnan(r.model_bandwidth_available)) return "";
  return fixed(r.model_bandwidth_drawn, 2) + " / " + fixed(r.model_bandwidth_available, 2);
}

// The timing model's fraction for a copy of the same bytes as `r` (the op/copy row of its
// shape, where the run has one), else NaN.
static double predicted_copy(const std::vector<BenchResult>& bench, const BenchResult& r) {
  for (const BenchResult& c : bench)
    if (c.backend == "copy" && c.op == r.op && c.shape == r.shape) return c.model_floor_fraction;
  return NAN;
}

// One result per (op, shape) that carries the GPU model's figures, in op and shape order.
static std::vector<const BenchResult*> model_rows(const std::vector<BenchResult>& bench) {
  std::map<std::pair<std::string, std::string>, const BenchResult*> rows;
  for (const BenchResult& r : bench)
    if (!std::isnan(r.model_sector_efficiency)) rows.emplace(std::make_pair(r.op, r.shape), &r);
  std::vector<const BenchResult*> out;
  out.reserve(rows.size());
  for (const auto& [_, r] : rows) out.push_back(r);
  return out;
}

std::string markdown_summary(const std::vector<BenchResult>& bench,
                             const std::vector<FuzzReport>& fuzz, const GateResult* gate,
                             const std::vector<KernelResource>& kernels, const History* history) {
  std::ostringstream md;
  md << "# mlarope report\n\n";
  if (!fuzz.empty()) {
    md << "## Fuzz\n\n";
    for (const FuzzReport& f : fuzz) {
      md << "- " << fuzz_headline(f) << "\n";
      for (const std::string& line : fuzz_support(f.json)) md << "  - " << line << "\n";
      if (const std::string fractions = fuzz_fractions(f.json); !fractions.empty())
        md << "  - " << fractions << "\n";
      for (const std::string& line : fuzz_shards(f.json)) md << "  - " << line << "\n";
      for (const std::string& line : fuzz_failures(f.json)) md << "  - " << line << "\n";
    }
    if (fuzz.size() > 1) md << "- " << fuzz_total(fuzz) << "\n";
    md << "\n";
  }
  if (!bench.empty()) {
    const std::vector<std::string> backends = backends_of(bench);
    md << "## Benchmarks: GB/s and fraction of the copy floor\n\n| op | shape |";
    for (const std::string& b : backends) md << " " << b << " |";
    md << "\n|---|---|";
    for (std::size_t i = 0; i < backends.size(); ++i) md << "---|";
    md << "\n";
    for (const auto& [op, shapes] : group(bench))
      for (const auto& [shape, by_backend] : shapes) {
        md << "| " << op << " | " << shape << " |";
        for (const std::string& b : backends) {
          const auto it = by_backend.find(b);
          if (it == by_backend.end()) md << " |";
          else
            md << " " << fixed(it->second.gbps, 1) << " GB/s, "
               << fixed(it->second.floor_fraction, 2) << " |";
        }
        md << "\n";
      }
    md << "\n";
  }
  const auto model = model_rows(bench);
  if (!model.empty()) {
    md << "## GPU model and timing model (host backend; predicted on an H200)\n\n"
          "| op | shape | sector efficiency | DRAM / minimum | H200 time | fraction of floor | "
          "copy of the same bytes "
          "| blocks/SM | waves | KiB in flight/SM | DRAM drawn / available |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const BenchResult* r : model) {
      const double copy = predicted_copy(bench, *r);
      md << "| " << r->op << " | " << r->shape << " | " << fixed(r->model_sector_efficiency, 2)
         << " | " << fixed(r->model_dram_fraction, 2) << " | " << maybe(r->model_time_us, 1, " us")
         << " | " << maybe(r->model_floor_fraction, 2) << " | " << maybe(copy, 2) << " | "
         << maybe(r->model_blocks_per_sm, 0) << " | " << maybe(r->model_waves, 2) << " | "
         << maybe(r->model_kib_in_flight, 1) << " | " << bandwidth_shares(*r) << " |\n";
    }
    md << "\n";
  }
  if (gate) md << gate_markdown(*gate);
  if (history) md << history_markdown(*history);
  md << kernel_resources_markdown(kernels);
  return md.str();
}

std::string html_page(const std::vector<BenchResult>& bench, const std::vector<FuzzReport>& fuzz,
                      const GateResult* gate, const std::vector<KernelResource>& kernels,
                      const History* history) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>mlarope report</title>\n"
       "<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;"
       "margin:8px 0}td,th{border:1px solid #ccc;padding:3px "
       "8px;text-align:right}th{background:#f3f3f3}"
       "td:first-child,th:first-child{text-align:left}.fail{color:#b00;font-weight:bold}"
       ".pass{color:#070;font-weight:bold}code{background:#f5f5f5;padding:1px 4px}</style>\n"
       "</head><body>\n<h1>mlarope report</h1>\n";
  if (gate) h << gate_html(*gate);
  for (const FuzzReport& f : fuzz) {
    h << "<h2>Fuzz</h2><p>" << escape(fuzz_headline(f)) << "</p>\n";
    const auto support = fuzz_support(f.json);
    if (!support.empty()) {
      h << "<h3>Not supported by the backend</h3><p>" << escape(support[0]) << "</p><ul>";
      for (std::size_t i = 1; i < support.size(); ++i) h << "<li>" << escape(support[i]) << "</li>";
      h << "</ul>\n";
    }
    const auto failures = fuzz_failures(f.json);
    if (!failures.empty()) {
      h << "<h3 class='fail'>Failures</h3><ul>";
      for (const std::string& line : failures) h << "<li><code>" << escape(line) << "</code></li>";
      h << "</ul>\n";
    }
    h << checks_html(f.json) << coverage_matrix_html(f.json);
    const auto counts = fuzz_counts(f.json);
    if (!counts.empty()) {
      h << "<h3>Coverage: cases per value</h3><div style='display:flex;flex-wrap:wrap;gap:16px'>";
      for (const auto& [category, rows] : counts) {
        h << "<table><tr><th>" << escape(category) << "</th><th>cases</th></tr>";
        for (const auto& [value, count] : rows)
          h << "<tr><td>" << escape(value) << "</td><td>" << static_cast<long long>(count)
            << "</td></tr>";
        h << "</table>";
      }
      h << "</div>\n";
    }
    for (const auto& [key, bins] : fuzz_histograms(f.json, "tolerance_fractions")) {
      std::vector<std::string> labels;
      Series s{"cases", {}};
      for (const auto& [label, count] : bins) labels.push_back(label), s.values.push_back(count);
      h << bar_chart("Worst error / tolerance, " + key, labels, {s},
                     "worst element's |error| / allowed (1 = at the limit)", "cases (log scale)", 0,
                     true);
    }
    for (const auto& [dtype, bins] : fuzz_histograms(f.json)) {
      std::vector<std::string> labels;
      Series s{"elements", {}};
      for (const auto& [label, count] : bins) labels.push_back(label), s.values.push_back(count);
      h << bar_chart("Error vs reference, " + dtype + " outputs (where the tolerance is relative)",
                     labels, {s}, "error (ulp of the output dtype)", "elements (log scale)", 0,
                     true);
    }
  }
  if (!bench.empty()) {
    const std::vector<std::string> backends = backends_of(bench);
    h << "<h2>Benchmarks</h2><p>Fraction of the floor = achieved bandwidth (minimum bytes the op "
         "must move, over its time) / bandwidth of a plain copy measured in the same run. 1.0 "
         "(dashed line) is the copy floor.</p>\n";
    for (const auto& [op, shapes] : group(bench)) {
      std::vector<std::string> categories;
      std::vector<Series> series;
      for (const std::string& b : backends)
        if (b.rfind("copy", 0) != 0) series.push_back({b, {}});  // copies are the floor itself
      for (const auto& [shape, by_backend] : shapes) {
        categories.push_back(shape);
        for (Series& s : series) {
          const auto it = by_backend.find(s.name);
          s.values.push_back(it == by_backend.end() ? NAN : it->second.floor_fraction);
        }
      }
      h << bar_chart(op + ": fraction of the copy floor", categories, series,
                     "shape (model/layout/tokens/dtype)", "fraction of copy bandwidth", 1.0);
    }
    h << "<table><tr><th>op</th><th>backend</th><th>shape</th><th>time (ms)</th><th>GB/s</th>"
         "<th>fraction of floor</th></tr>\n";
    for (const BenchResult& r : medians(bench))
      h << "<tr><td>" << escape(r.op) << "</td><td>" << escape(r.backend) << "</td><td>"
        << escape(r.shape) << "</td><td>" << fixed(r.time_ms, 3) << "</td><td>" << fixed(r.gbps, 1)
        << "</td><td>" << fixed(r.floor_fraction, 3) << "</td></tr>\n";
    h << "</table>\n";
  }
  const auto model = model_rows(bench);
  if (!model.empty()) {
    h << "<h2>GPU model and timing model</h2><p>The host backend's model of a GPU on each shape (a "
         "sample "
         "of each launch's blocks): sector efficiency = distinct bytes the threads of a warp ask "
         "for / bytes of "
         "the 32-byte sectors that access touches (1 = coalesced); DRAM = distinct sectors touched "
         "x 32 bytes, "
         "over the op's minimum bytes. The timing model's prediction on an H200 "
         "(include/mlarope/timing.h, "
         "fitted to the H200's measurements): the time of one call, its fraction of the copy "
         "floor, the same for a "
         "copy of the op's bytes, resident blocks per SM, waves, bytes in flight per SM, and the "
         "shares of the copy bandwidth its first wave draws and its DRAM page density leaves it."
         "</p>\n"
         "<table><tr><th>op</th><th>shape</th><th>sector efficiency</th><th>DRAM / minimum</th>"
         "<th>H200 time</th><th>fraction of floor</th><th>copy</th><th>blocks/SM</th><th>waves</th>"
         "<th>KiB in flight/SM</th><th>DRAM drawn / available</th></tr>\n";
    for (const BenchResult* r : model)
      h << "<tr><td>" << escape(r->op) << "</td><td>" << escape(r->shape) << "</td><td>"
        << fixed(r->model_sector_efficiency, 3) << "</td><td>" << fixed(r->model_dram_fraction, 3)
        << "</td><td>" << maybe(r->model_time_us, 1, " us") << "</td><td>"
        << maybe(r->model_floor_fraction, 2) << "</td><td>" << maybe(predicted_copy(bench, *r), 2)
        << "</td><td>" << maybe(r->model_blocks_per_sm, 0) << "</td><td>"
        << maybe(r->model_waves, 2) << "</td><td>" << maybe(r->model_kib_in_flight, 1)
        << "</td><td>" << bandwidth_shares(*r) << "</td></tr>\n";
    h << "</table>\n";
  }
  h << kernel_resources_html(kernels);
  if (history) h << history_html(*history);
  h << "</body></html>\n";
  return h.str();
}

}  // namespace mlarope::reports
