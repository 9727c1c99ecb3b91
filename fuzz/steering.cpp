// SPDX-License-Identifier: Apache-2.0
#include "fuzz/steering.h"

#include <algorithm>
#include <array>
#include <optional>
#include <sstream>
#include <vector>

#include "fuzz/case_spec.h"
#include "fuzz/fuzz.h"
#include "mlarope/error.h"

namespace mlarope::harness {
namespace {

// Probes of the first stage at most, and the accepted cases it looks for.
constexpr std::int64_t kFirstProbes = 8000;
constexpr std::size_t kFirstAccepted = 4;
// A backend that took this share of at least kEarlyLook probes needs no steering.
constexpr std::int64_t kEarlyLook = 256;
constexpr double kTakesNearlyAll = 0.9;
// Probes per dimension in the second stage.
constexpr std::int64_t kProbesPerDimension = 64;
constexpr double kKeptShareOfBest = 0.25;
constexpr std::uint64_t kProbeSalt = 0x5354454552494E47ull;  // "STEERING"

std::string yes_no(bool b) { return b ? "true" : "false"; }

// Keep the elements of `list` whose spelling is in `values`.
template <class T, class Spell>
void keep_only(std::vector<T>& list, const std::set<std::string>& values, Spell spell) {
  std::vector<T> kept;
  for (const T& x : list)
    if (values.count(spell(x))) kept.push_back(x);
  if (!kept.empty()) list = kept;
}

// The pair layout every accepted case had, if they all had one.
std::optional<PairLayout> only_layout(const std::set<std::string>& values) {
  if (values.size() != 1) return std::nullopt;
  for (PairLayout l : {PairLayout::interleaved, PairLayout::half})
    if (to_string(l) == *values.begin()) return l;
  return std::nullopt;
}

// A dimension of the call: its value in a case, and how the options keep only some values.
struct Dimension {
  const char* name;
  std::string (*value)(const props::CaseSpec&);
  void (*keep)(props::GenOptions&, const std::set<std::string>&);
};

const std::vector<Dimension>& dimensions() {
  using props::CaseSpec;
  using props::GenOptions;
  using Values = std::set<std::string>;
  static const std::vector<Dimension> all = {
      {"op", [](const CaseSpec& s) { return std::string(to_string(s.op)); },
       [](GenOptions& o, const Values& v) {
         keep_only(o.ops, v, [](Op x) { return std::string(to_string(x)); });
       }},
      {"tokens", [](const CaseSpec& s) { return std::string(to_string(s.layout)); },
       [](GenOptions& o, const Values& v) {
         keep_only(o.layouts, v, [](TokenLayout x) { return std::string(to_string(x)); });
       }},
      {"dtype", [](const CaseSpec& s) { return std::string(to_string(s.dtype)); },
       [](GenOptions& o, const Values& v) {
         keep_only(o.dtypes, v, [](DType x) { return std::string(to_string(x)); });
       }},
      {"table_dtype", [](const CaseSpec& s) { return std::string(to_string(s.table_dtype)); },
       [](GenOptions& o, const Values& v) {
         keep_only(o.table_dtypes, v, [](DType x) { return std::string(to_string(x)); });
       }},
      {"in_layout", [](const CaseSpec& s) { return std::string(to_string(s.in_layout)); },
       [](GenOptions& o, const Values& v) {
         if (const auto l = only_layout(v)) o.in_layout = l;
       }},
      {"out_layout", [](const CaseSpec& s) { return std::string(to_string(s.out_layout)); },
       [](GenOptions& o, const Values& v) {
         if (const auto l = only_layout(v)) o.out_layout = l;
       }},
      {"table_layout", [](const CaseSpec& s) { return std::string(to_string(s.table_layout)); },
       [](GenOptions& o, const Values& v) {
         if (const auto l = only_layout(v)) o.table_layout = l;
       }},
      // The generator can leave in place out, not force it: a backend of in-place calls only
      // keeps the full draw here.
      {"in_place", [](const CaseSpec& s) { return yes_no(s.in_place); },
       [](GenOptions& o, const Values& v) {
         if (!v.count("true")) o.in_place = false;
       }},
      {"cp_size", [](const CaseSpec& s) { return std::to_string(s.cp_size); },
       [](GenOptions& o, const Values& v) {
         keep_only(o.cp_sizes, v, [](std::int64_t x) { return std::to_string(x); });
       }},
      {"seq_offsets", [](const CaseSpec& s) { return yes_no(s.seq_offsets); },
       [](GenOptions& o, const Values& v) {
         if (!v.count("true")) o.seq_offsets = false;
       }},
      {"position_ids", [](const CaseSpec& s) { return yes_no(s.position_ids); },
       [](GenOptions& o, const Values& v) {
         if (!v.count("true")) o.position_ids = false;
       }},
      {"freq_mode", [](const CaseSpec& s) { return std::string(to_string(s.freq_mode)); },
       [](GenOptions& o, const Values& v) {
         if (!v.count(std::string(to_string(FreqMode::packed)))) o.packed = false;
       }},
  };
  return all;
}

using Kept = std::map<std::string, std::set<std::string>>;

// `full` narrowed to `kept`, leaving out the dimension `free` (nullptr: none).
props::GenOptions narrow(props::GenOptions o, const Kept& kept, const char* free = nullptr) {
  for (const Dimension& d : dimensions()) {
    if (free != nullptr && std::string(d.name) == free) continue;
    const auto it = kept.find(d.name);
    if (it != kept.end()) d.keep(o, it->second);
  }
  return o;
}

// Offers drawn cases to the backend, counting them.
struct Prober {
  const Backend& backend;
  std::uint64_t seed;
  int size;
  std::int64_t probes = 0, accepted = 0;

  // The next case of the probe stream drawn from `options`, and whether the backend takes it.
  std::pair<props::CaseSpec, bool> offer(const props::GenOptions& options) {
    const props::CaseSpec spec =
        props::random_spec(case_seed(seed ^ kProbeSalt, probes++), size, options);
    bool takes = true;
    try {
      takes = backend.supports(props::materialize(spec)).empty();
    } catch (const Error&) {
      // Not a decline: the run itself will say what is wrong with the call.
    }
    accepted += takes ? 1 : 0;
    return {spec, takes};
  }
};

void add_values(Kept& kept, const props::CaseSpec& spec) {
  for (const Dimension& d : dimensions()) kept[d.name].insert(d.value(spec));
}

}  // namespace

Steering learn_steering(const props::GenOptions& full, const Backend& backend, std::uint64_t seed,
                        int size) {
  Steering s;
  s.narrowed = full;
  if (!backend.supports) return s;
  Prober prober{backend, seed, size};
  // First: a few accepted cases among every option's draws (and enough draws to tell a
  // backend that takes nearly everything, which needs no steering).
  Kept base;
  std::size_t found = 0;
  while ((found < kFirstAccepted || prober.probes < kEarlyLook) && prober.probes < kFirstProbes)
    if (const auto [spec, takes] = prober.offer(full); takes) {
      add_values(base, spec);
      ++found;
    }
  s.probes = prober.probes;
  s.accepted = prober.accepted;
  if (found == 0 || s.accepted >= kTakesNearlyAll * static_cast<double>(s.probes)) return s;
  // Then each dimension free in turn, the others held to what was accepted: a value is kept
  // where it was taken at least a quarter as often as the value taken most often (a value
  // taken only by accident of another parameter, say an offsets flag on a case with no rows,
  // is not what the backend computes).
  Kept kept;
  for (const Dimension& d : dimensions()) {
    const props::GenOptions options = narrow(full, base, d.name);
    std::map<std::string, std::array<std::int64_t, 2>> tally;  // value -> probes, taken
    for (std::int64_t i = 0; i < kProbesPerDimension; ++i) {
      const auto [spec, takes] = prober.offer(options);
      std::array<std::int64_t, 2>& t = tally[d.value(spec)];
      ++t[0];
      t[1] += takes ? 1 : 0;
    }
    double best = 0;
    for (const auto& [value, t] : tally) best = std::max(best, static_cast<double>(t[1]) / t[0]);
    for (const auto& [value, t] : tally)
      if (t[1] > 0 && static_cast<double>(t[1]) / t[0] >= kKeptShareOfBest * best)
        kept[d.name].insert(value);
    if (kept[d.name].empty()) kept[d.name] = base.at(d.name);  // nothing taken here: as found
  }
  s.probes = prober.probes;
  s.accepted = prober.accepted;
  s.kept = kept;
  s.narrowed = narrow(full, kept);
  s.active = true;
  return s;
}

bool draws_steered(const Steering& steering, std::uint64_t case_seed) {
  return steering.active && (case_seed >> 61) != 0;  // the top three bits: 7 cases in 8
}

nlohmann::json to_json(const Steering& s) {
  nlohmann::json kept = nlohmann::json::object();
  for (const auto& [dimension, values] : s.kept) kept[dimension] = values;
  return {{"active", s.active}, {"probes", s.probes}, {"accepted", s.accepted}, {"kept", kept}};
}

Steering steering_from_json(const nlohmann::json& j, const props::GenOptions& full) {
  Steering s;
  try {
    s.active = j.at("active").get<bool>();
    s.probes = j.at("probes").get<std::int64_t>();
    s.accepted = j.at("accepted").get<std::int64_t>();
    for (const auto& [dimension, values] : j.at("kept").items())
      s.kept[dimension] = values.get<std::set<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("steering: not what to_json writes: ") + e.what());
  }
  s.narrowed = s.active ? narrow(full, s.kept) : full;
  return s;
}

std::string describe(const Steering& s) {
  std::ostringstream out;
  if (!s.active) {
    out << "not steered (" << s.accepted << " of " << s.probes << " probes accepted)";
    return out.str();
  }
  out << "7 cases in 8 drawn from what the backend accepted in " << s.probes << " probes ("
      << s.accepted << " accepted):";
  for (const auto& [dimension, values] : s.kept) {
    out << " " << dimension << " ";
    bool first = true;
    for (const std::string& v : values) out << (first ? "" : ",") << v, first = false;
    out << ";";
  }
  return out.str();
}

}  // namespace mlarope::harness
