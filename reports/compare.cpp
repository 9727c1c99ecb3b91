// SPDX-License-Identifier: Apache-2.0
#include "compare.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "svg.h"

namespace mlarope::reports {
namespace {

using nlohmann::json;

// The backend part of "op/backend/shape".
std::string backend_of(const std::string& key) {
  const std::size_t first = key.find('/');
  if (first == std::string::npos) return "";
  const std::size_t second = key.find('/', first + 1);
  return key.substr(first + 1,
                    second == std::string::npos ? std::string::npos : second - first - 1);
}

// Why `samples` cannot enter the test, or "" when they can.
std::string unusable(const std::vector<double>& samples, const char* side, int min_samples) {
  for (const double x : samples)
    if (!std::isfinite(x) || x <= 0)
      return std::string("a ") + side + " sample is not a positive number";
  if (static_cast<int>(samples.size()) < min_samples)
    return std::to_string(samples.size()) + " " + side + " repetitions, fewer than " +
           std::to_string(min_samples);
  return "";
}

std::string percent(double x) { return (x >= 0 ? "+" : "") + fixed(100 * x, 1) + "%"; }

std::string p_text(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, p < 1e-3 ? "%.1e" : "%.4f", p);
  return buf;
}

}  // namespace

const char* to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::same: return "SAME";
    case Verdict::faster: return "FASTER";
    case Verdict::slower: return "SLOWER";
    case Verdict::unknown: break;
  }
  return "UNKNOWN";
}

double min_effect_of(const std::string& key, const CompareOptions& o) {
  std::size_t longest = 0;
  double effect =
      backend_of(key).find("cuda") != std::string::npos ? o.gpu_min_effect : o.host_min_effect;
  for (const auto& [prefix, value] : o.key_min_effect)
    if (key.compare(0, prefix.size(), prefix) == 0 && prefix.size() >= longest)
      longest = prefix.size(), effect = value;
  return effect;
}

Samples floor_fraction_samples(const std::vector<BenchResult>& results) {
  Samples samples;
  for (const BenchResult& r : results) samples[r.key()].push_back(r.floor_fraction);
  return samples;
}

Verdict Comparison::overall() const {
  bool unknown = false;
  for (const KeyComparison& k : keys) {
    if (k.verdict == Verdict::slower) return Verdict::slower;
    unknown = unknown || k.verdict == Verdict::unknown;
  }
  return unknown ? Verdict::unknown : Verdict::same;
}

std::vector<std::string> Comparison::slower_keys() const {
  std::vector<std::string> out;
  for (const KeyComparison& k : keys)
    if (k.verdict == Verdict::slower) out.push_back(k.key);
  return out;
}

int GateResult::exit_status() const {
  if (!applied) return 0;
  switch (comparison.overall()) {
    case Verdict::slower: return 1;
    case Verdict::unknown: return 3;
    default: return 0;
  }
}

Comparison compare(const Samples& base, const Samples& change, const CompareOptions& o) {
  Comparison c;
  c.options = o;
  std::set<std::string> names;
  for (const auto& [key, _] : base) names.insert(key);
  for (const auto& [key, _] : change) names.insert(key);
  std::vector<std::size_t> tested;  // indices into c.keys of Holm's family
  for (const std::string& name : names) {
    KeyComparison k;
    k.key = name;
    k.min_effect = min_effect_of(name, o);
    if (const auto it = base.find(name); it != base.end()) k.base = it->second;
    if (const auto it = change.find(name); it != change.end()) k.change = it->second;
    k.base_median = median(k.base);
    k.change_median = median(k.change);
    if (k.base.empty() || k.change.empty()) {
      k.reason = k.base.empty() ? "measured in the change only" : "not measured in the change";
    } else if (const std::string why = unusable(k.base, "base", o.min_samples); !why.empty()) {
      k.reason = why;
    } else if (const std::string why2 = unusable(k.change, "change", o.min_samples);
               !why2.empty()) {
      k.reason = why2;
    } else {
      tested.push_back(c.keys.size());
    }
    c.keys.push_back(std::move(k));
  }
  c.tested = static_cast<int>(tested.size());
  std::vector<double> p_less, p_greater;
  for (const std::size_t i : tested) {
    KeyComparison& k = c.keys[i];
    k.tested = true;
    const MannWhitney mw =
        mann_whitney(k.change, k.base);  // less: the change's fractions lie below
    p_less.push_back(mw.p_less);
    p_greater.push_back(mw.p_greater);
    k.change_estimate = relative_change(k.base, k.change, o.level);
  }
  const std::vector<double> slower = holm_adjust(p_less), faster = holm_adjust(p_greater);
  for (std::size_t j = 0; j < tested.size(); ++j) {
    KeyComparison& k = c.keys[tested[j]];
    k.p_slower = slower[j];
    k.p_faster = faster[j];
    // The best p these sample sizes allow, after Holm's factor for the family: if even that is
    // not below alpha, no data of this size could say SLOWER, and SAME would be a guess.
    const double best =
        smallest_p(static_cast<int>(k.change.size()), static_cast<int>(k.base.size())) * c.tested;
    if (best >= o.alpha) {
      k.verdict = Verdict::unknown;
      k.reason = "too few repetitions: " + std::to_string(k.base.size()) + " and " +
                 std::to_string(k.change.size()) + " cannot give p < " + p_text(o.alpha) +
                 " over " + std::to_string(c.tested) + " keys";
    } else if (k.p_slower < o.alpha && k.change_estimate.estimate < -k.min_effect) {
      k.verdict = Verdict::slower;
    } else if (k.p_faster < o.alpha && k.change_estimate.estimate > k.min_effect) {
      k.verdict = Verdict::faster;
    } else {
      k.verdict = Verdict::same;
    }
  }
  return c;
}

Comparison confirm(const Comparison& first, const Comparison& repeat) {
  Comparison out = first;
  for (KeyComparison& k : out.keys) {
    if (k.verdict != Verdict::slower) continue;
    const auto it = std::find_if(repeat.keys.begin(), repeat.keys.end(),
                                 [&](const KeyComparison& r) { return r.key == k.key; });
    const std::string first_said = "first measurement SLOWER (" +
                                   percent(k.change_estimate.estimate) + ", p " +
                                   p_text(k.p_slower) + ")";
    if (it == repeat.keys.end()) {
      k.verdict = Verdict::unknown;
      k.reason = first_said + "; not measured again";
      continue;
    }
    KeyComparison again = *it;
    again.confirmed = again.verdict == Verdict::slower;
    again.reason = first_said + (again.confirmed ? "; repeated" : "; not repeated") +
                   (it->reason.empty() ? "" : ": " + it->reason);
    k = std::move(again);
  }
  return out;
}

std::string comparison_markdown(const Comparison& c) {
  std::ostringstream md;
  md << "| key | base median | change median | change | " << fixed(100 * c.options.level, 0)
     << "% interval | p slower | p faster | min effect | verdict "
        "|\n|---|---|---|---|---|---|---|---|---|\n";
  for (const KeyComparison& k : c.keys) {
    md << "| " << k.key << " | ";
    if (k.base.empty()) md << "|";
    else md << fixed(k.base_median, 4) << " (n " << k.base.size() << ") |";
    if (k.change.empty()) md << " |";
    else md << " " << fixed(k.change_median, 4) << " (n " << k.change.size() << ") |";
    if (k.tested)
      md << " " << percent(k.change_estimate.estimate) << " | [" << percent(k.change_estimate.lower)
         << ", " << percent(k.change_estimate.upper) << "] | " << p_text(k.p_slower) << " | "
         << p_text(k.p_faster) << " |";
    else md << " | | | |";
    md << " " << fixed(100 * k.min_effect, 0) << "% | **" << to_string(k.verdict) << "**"
       << (k.confirmed ? " (repeated)" : "") << (k.reason.empty() ? "" : ": " + k.reason) << " |\n";
  }
  md << "\nSLOWER: p < " << p_text(c.options.alpha) << " (exact one-sided Mann-Whitney, Holm over "
     << c.tested << " keys) and a drop beyond the minimum effect; verdict: **"
     << to_string(c.overall()) << "**\n";
  return md.str();
}

json to_json(const Comparison& c) {
  json keys = json::array();
  for (const KeyComparison& k : c.keys)
    keys.push_back({{"key", k.key},
                    {"verdict", to_string(k.verdict)},
                    {"confirmed", k.confirmed},
                    {"reason", k.reason},
                    {"base", k.base},
                    {"change", k.change},
                    {"base_median", k.base.empty() ? json(nullptr) : json(k.base_median)},
                    {"change_median", k.change.empty() ? json(nullptr) : json(k.change_median)},
                    {"relative_change", k.change_estimate.estimate},
                    {"interval", {k.change_estimate.lower, k.change_estimate.upper}},
                    {"interval_confidence", k.change_estimate.confidence},
                    {"p_slower", k.p_slower},
                    {"p_faster", k.p_faster},
                    {"min_effect", k.min_effect}});
  return {{"measure", "floor_fraction"},
          {"alpha", c.options.alpha},
          {"level", c.options.level},
          {"min_samples", c.options.min_samples},
          {"keys_tested", c.tested},
          {"verdict", to_string(c.overall())},
          {"keys", keys}};
}

harness::JunitSuite junit_suite(const Comparison& c, const std::string& name) {
  harness::JunitSuite suite;
  suite.name = name;
  suite.properties = {{"measure", "floor_fraction"},
                      {"alpha", p_text(c.options.alpha)},
                      {"keys_tested", std::to_string(c.tested)}};
  for (const KeyComparison& k : c.keys) {
    harness::JunitCase t;
    t.classname = "mlarope.bench." + backend_of(k.key);
    t.name = k.key;
    std::ostringstream text;
    text << "base median " << k.base_median << " (n " << k.base.size() << "), change median "
         << k.change_median << " (n " << k.change.size() << "), change "
         << percent(k.change_estimate.estimate) << " [" << percent(k.change_estimate.lower) << ", "
         << percent(k.change_estimate.upper) << "], p slower " << p_text(k.p_slower)
         << ", minimum effect " << fixed(100 * k.min_effect, 0) << "%";
    if (!k.reason.empty()) text << "; " << k.reason;
    if (k.verdict == Verdict::slower) {
      t.outcome = harness::JunitCase::Outcome::failure;
      t.message = "SLOWER: floor fraction " + percent(k.change_estimate.estimate);
      t.text = text.str();
    } else if (k.verdict == Verdict::unknown) {
      t.outcome = harness::JunitCase::Outcome::error;
      t.message = "UNKNOWN: " + k.reason;
      t.text = text.str();
    }
    suite.cases.push_back(t);
  }
  return suite;
}

}  // namespace mlarope::reports
