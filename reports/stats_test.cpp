// SPDX-License-Identifier: Apache-2.0
// The gate's statistics against values worked out by hand and by enumerating every way of
// splitting the pooled samples, and the verdicts the gate draws from them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "compare.h"
#include "stats.h"

using namespace mlarope::reports;

namespace {

// P(rank sum of x <= observed) by enumerating every subset of the pooled midranks: the
// definition, with none of the counting the library does.
double p_less_by_enumeration(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<double> pooled(x);
  pooled.insert(pooled.end(), y.begin(), y.end());
  const std::size_t n = pooled.size();
  std::vector<double> rank(n);
  for (std::size_t i = 0; i < n; ++i) {
    double below = 0, equal = 0;
    for (std::size_t j = 0; j < n; ++j)
      below += pooled[j] < pooled[i], equal += pooled[j] == pooled[i];
    rank[i] = below + (equal + 1) / 2;
  }
  double observed = 0;
  for (std::size_t i = 0; i < x.size(); ++i) observed += rank[i];
  double hits = 0, all = 0;
  for (unsigned mask = 0; mask < (1u << n); ++mask) {
    if (static_cast<std::size_t>(__builtin_popcount(mask)) != x.size()) continue;
    double sum = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (mask >> i & 1) sum += rank[i];
    all += 1;
    hits += sum <= observed + 1e-9;
  }
  return hits / all;
}

std::vector<double> scaled(std::vector<double> v, double factor) {
  for (double& x : v) x *= factor;
  return v;
}

// Nine floor fractions near `center` with a spread of +-2%.
std::vector<double> nine_near(double center, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> noise(-0.02, 0.02);
  std::vector<double> v;
  v.reserve(9);
  for (int i = 0; i < 9; ++i) v.push_back(center * (1 + noise(rng)));
  return v;
}

}  // namespace

TEST(Stats, MannWhitneyExactTailsWorkedByHand) {
  // All of x below all of y: 1 of the C(6,3) = 20 splits.
  MannWhitney mw = mann_whitney({1, 2, 3}, {4, 5, 6});
  EXPECT_DOUBLE_EQ(mw.p_less, 1.0 / 20);
  EXPECT_DOUBLE_EQ(mw.p_greater, 1.0);
  // Rank sum 7 = 1 + 2 + 4: the sums 6 and 7 are one split each.
  mw = mann_whitney({1, 2, 4}, {3, 5, 6});
  EXPECT_DOUBLE_EQ(mw.p_less, 2.0 / 20);
  EXPECT_DOUBLE_EQ(mw.p_greater, 19.0 / 20);
  // Every value tied: no evidence either way.
  mw = mann_whitney({1, 1}, {1, 1});
  EXPECT_DOUBLE_EQ(mw.p_less, 1.0);
  EXPECT_DOUBLE_EQ(mw.p_greater, 1.0);
}

TEST(Stats, MannWhitneyMatchesEnumerationWithTies) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> value(0, 5);  // few distinct values: many ties
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<double> x(4 + trial % 3), y(3 + trial % 4);
    for (double& v : x) v = value(rng);
    for (double& v : y) v = value(rng);
    EXPECT_NEAR(mann_whitney(x, y).p_less, p_less_by_enumeration(x, y), 1e-12) << "trial " << trial;
    EXPECT_NEAR(mann_whitney(x, y).p_greater, p_less_by_enumeration(scaled(x, -1), scaled(y, -1)),
                1e-12);
  }
}

TEST(Stats, SmallestPHolmAndMedian) {
  EXPECT_NEAR(smallest_p(9, 9), 1.0 / 48620, 1e-15);
  EXPECT_NEAR(smallest_p(3, 3), 0.05, 1e-15);
  // Holm: 0.01 x 3, then 0.03 x 2 = 0.06, then 0.04 x 1 lifted to 0.06 (never below an earlier
  // one).
  const std::vector<double> adjusted = holm_adjust({0.01, 0.04, 0.03});
  EXPECT_NEAR(adjusted[0], 0.03, 1e-15);
  EXPECT_NEAR(adjusted[1], 0.06, 1e-15);
  EXPECT_NEAR(adjusted[2], 0.06, 1e-15);
  EXPECT_DOUBLE_EQ(holm_adjust({0.9, 0.8})[0], 1.0);  // capped at 1
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_TRUE(std::isnan(median({})));
}

TEST(Stats, RelativeChangeEstimatesAScaledCopyAndCoversIt) {
  const std::vector<double> base = nine_near(0.8, 1);
  const RelativeChange r = relative_change(base, scaled(base, 0.87));
  EXPECT_NEAR(r.estimate, -0.13, 1e-12);  // every pairwise ratio of matched values is 0.87
  EXPECT_LE(r.lower, r.estimate);
  EXPECT_GE(r.upper, r.estimate);
  EXPECT_GE(r.confidence, 0.95);
  EXPECT_LT(r.confidence, 0.97);
  // With 2 against 2 no interval reaches 95%: the widest one, and what it achieves, is given.
  const RelativeChange tiny = relative_change({1, 2}, {3, 4});
  EXPECT_NEAR(tiny.confidence, 1 - 2.0 / 6, 1e-12);
  EXPECT_NEAR(tiny.lower, 3.0 / 2 - 1, 1e-12);
  EXPECT_NEAR(tiny.upper, 4.0 / 1 - 1, 1e-12);
}

TEST(Compare, VerdictsOfAClearDropNoiseASmallShiftAndTooFewSamples) {
  const Samples base = {{"rope/host/a", nine_near(0.8, 1)},
                        {"rope/host/b", nine_near(0.8, 2)},
                        {"rope/host/c", nine_near(0.8, 3)},
                        {"rope/host/d", nine_near(0.8, 4)},
                        {"rope/host/e", nine_near(0.8, 5)}};
  Samples change = {{"rope/host/a", scaled(nine_near(0.8, 11), 0.85)},  // 15% slower
                    {"rope/host/b", nine_near(0.8, 12)},                // unchanged
                    {"rope/host/c",
                     scaled(nine_near(0.8, 13), 0.96)},  // 4%: real, below the effect
                    {"rope/host/d", scaled(nine_near(0.8, 14), 1.2)}};  // 20% faster
  const std::vector<double> nine = nine_near(0.8, 15);
  change["rope/host/e"] = std::vector<double>(nine.begin(), nine.begin() + 5);
  change["rope/host/f"] = nine_near(0.8, 16);  // not in the base
  const Comparison c = compare(base, change, CompareOptions{});
  ASSERT_EQ(c.keys.size(), 6u);
  EXPECT_EQ(c.tested, 4);
  EXPECT_EQ(c.keys[0].verdict, Verdict::slower);
  EXPECT_LT(c.keys[0].p_slower, 0.002);
  EXPECT_NEAR(c.keys[0].change_estimate.estimate, -0.15, 0.04);
  EXPECT_EQ(c.keys[1].verdict, Verdict::same);
  EXPECT_EQ(c.keys[2].verdict, Verdict::same);
  EXPECT_LT(c.keys[2].p_slower, 0.002) << "a 4% shift is detectable, but below the 10% that fails";
  EXPECT_EQ(c.keys[3].verdict, Verdict::faster);
  EXPECT_EQ(c.keys[4].verdict, Verdict::unknown);
  EXPECT_NE(c.keys[4].reason.find("5 change repetitions, fewer than 9"), std::string::npos)
      << c.keys[4].reason;
  EXPECT_EQ(c.keys[5].verdict, Verdict::unknown);
  EXPECT_EQ(c.keys[5].reason, "measured in the change only");
  EXPECT_EQ(c.overall(), Verdict::slower);
  EXPECT_EQ(c.slower_keys(), std::vector<std::string>{"rope/host/a"});
}

TEST(Compare, NoisyDropIsNotShownAndUnknownIsNeverAPass) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> wide(0.4, 1.2);  // noise far beyond the drop
  std::vector<double> base(9), change(9);
  for (double& v : base) v = wide(rng);
  for (double& v : change) v = 0.85 * wide(rng);
  const Comparison noisy = compare({{"k/host/s", base}}, {{"k/host/s", change}}, CompareOptions{});
  EXPECT_EQ(noisy.keys[0].verdict, Verdict::same);
  const Comparison few =
      compare({{"k/host/s", {0.8, 0.8, 0.8}}}, {{"k/host/s", {0.8, 0.8, 0.8}}}, CompareOptions{});
  EXPECT_EQ(few.overall(), Verdict::unknown);
  GateResult gate;
  gate.comparison = few;
  EXPECT_EQ(gate.exit_status(), 3);
  // Enough repetitions per key but too many keys for Holm to reach alpha: UNKNOWN too.
  CompareOptions o;
  o.min_samples = 3;
  Samples many_base, many_change;
  for (int i = 0; i < 10; ++i) {
    many_base["k/host/" + std::to_string(i)] = {0.8, 0.81, 0.79};
    many_change["k/host/" + std::to_string(i)] = {0.4, 0.41, 0.39};
  }
  const Comparison holm = compare(many_base, many_change, o);
  EXPECT_EQ(holm.overall(), Verdict::unknown);
  EXPECT_NE(holm.keys[0].reason.find("too few repetitions"), std::string::npos)
      << holm.keys[0].reason;
}

TEST(Compare, MinimumEffectPerBackendAndPerKey) {
  CompareOptions o;
  EXPECT_DOUBLE_EQ(min_effect_of("rope/host/dsv3/sbhd/T1024/bf16", o), 0.10);
  EXPECT_DOUBLE_EQ(min_effect_of("rope/cuda/dsv3/sbhd/T1024/bf16", o), 0.05);
  o.key_min_effect["rope_inplace/"] = 0.2;
  o.key_min_effect["rope_inplace/host/small"] = 0.3;
  EXPECT_DOUBLE_EQ(min_effect_of("rope_inplace/host/dsv3/sbhd/T1024/bf16", o), 0.2);
  EXPECT_DOUBLE_EQ(min_effect_of("rope_inplace/host/small/sbhd/T1024/bf16", o), 0.3);
  EXPECT_DOUBLE_EQ(min_effect_of("rope/host/small/sbhd/T1024/bf16", o), 0.10);
}

TEST(Compare, ASlowerKeyMustRepeatBeforeTheGateFails) {
  const Samples base = {{"rope/host/a", nine_near(0.8, 1)}, {"rope/host/b", nine_near(0.8, 2)}};
  const Samples slow = {{"rope/host/a", scaled(nine_near(0.8, 3), 0.8)},
                        {"rope/host/b", nine_near(0.8, 4)}};
  const Comparison first = compare(base, slow, CompareOptions{});
  ASSERT_EQ(first.overall(), Verdict::slower);
  // Measured again only for the SLOWER key: slower again -> confirmed.
  const Comparison again_slow =
      compare({{"rope/host/a", nine_near(0.8, 5)}},
              {{"rope/host/a", scaled(nine_near(0.8, 6), 0.8)}}, CompareOptions{});
  const Comparison confirmed = confirm(first, again_slow);
  EXPECT_EQ(confirmed.overall(), Verdict::slower);
  EXPECT_TRUE(confirmed.keys[0].confirmed);
  EXPECT_EQ(confirmed.keys[1].verdict, Verdict::same);
  // Not slower the second time -> the key passes, the first verdict kept in its reason.
  const Comparison again_same = compare({{"rope/host/a", nine_near(0.8, 7)}},
                                        {{"rope/host/a", nine_near(0.8, 8)}}, CompareOptions{});
  const Comparison passed = confirm(first, again_same);
  EXPECT_EQ(passed.overall(), Verdict::same);
  EXPECT_NE(passed.keys[0].reason.find("first measurement SLOWER"), std::string::npos);
  EXPECT_NE(passed.keys[0].reason.find("not repeated"), std::string::npos);
  // Not measured again at all -> UNKNOWN, not a pass.
  EXPECT_EQ(confirm(first, Comparison{}).overall(), Verdict::unknown);
}
