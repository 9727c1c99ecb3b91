// SPDX-License-Identifier: Apache-2.0
// The one random number generator of the tests and of the fuzz's case data: splitmix64,
// deterministic and the same on every platform, so a seed names the same data everywhere (a
// repro directory's data_seed included).
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace mlarope {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  /// A generator of its own for each named stream of one seed (the name is hashed in, FNV-1a
  /// style), so that drawing more of one stream does not shift another.
  Rng(std::uint64_t seed, std::string_view stream) : state_(seed) {
    for (char ch : stream) state_ = (state_ ^ static_cast<unsigned char>(ch)) * 0x100000001B3ull;
  }
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [0, n); 0 when n <= 0.
  std::int64_t below(std::int64_t n) {
    return n <= 0 ? 0 : static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n));
  }
  /// -1 or +1.
  double sign() { return (next() & 1) ? -1.0 : 1.0; }
  /// Magnitude uniform in [lo, hi), random sign.
  double signed_magnitude(double lo, double hi) {
    const double m = uniform(lo, hi);
    return (next() & 1) ? -m : m;
  }
  /// Standard normal (Box-Muller).
  double normal() {
    const double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }

 private:
  std::uint64_t state_;
};

}  // namespace mlarope
