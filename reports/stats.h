// SPDX-License-Identifier: Apache-2.0
// The statistics of the benchmark gate: an exact one-sided Mann-Whitney U test, Holm's
// correction over several keys, and a distribution-free estimate of the change between two
// samples with its confidence interval. Exact, not asymptotic: the gate compares 9 to 30
// repetitions a side, where the normal approximation misplaces the small p values it needs.
#pragma once

#include <vector>

namespace mlarope::reports {

/// One-sided exact Mann-Whitney p values of two samples (ties get midranks; the null
/// distribution is that of the rank sum over every way of choosing which values are x's).
struct MannWhitney {
  double p_less = 1;     ///< P(a rank sum of x as small or smaller): x tends to lie below y
  double p_greater = 1;  ///< P(a rank sum of x as large or larger): x tends to lie above y
};
MannWhitney mann_whitney(const std::vector<double>& x, const std::vector<double>& y);

/// The smallest one-sided p value an exact test of n against m distinct values can give:
/// 1 / C(n + m, n).
double smallest_p(int n, int m);

/// Holm's step-down adjustment of p values tested together (same order as given): the
/// adjusted values control the family-wise error rate at any level they are compared with.
std::vector<double> holm_adjust(const std::vector<double>& p);

/// The median (the mean of the two middle values of an even count); NaN when empty.
double median(std::vector<double> values);

/// The relative change from `base` to `change` (positive samples): the Hodges-Lehmann
/// estimate of the shift of log(change) - log(base), as a ratio minus one, with the
/// distribution-free confidence interval that inverts the Mann-Whitney test.
struct RelativeChange {
  double estimate = 0;  ///< e.g. -0.13: change is 13% below base
  double lower = 0, upper = 0;
  double confidence = 0;  ///< what the interval achieves (at least the level asked, when it can)
};
RelativeChange relative_change(const std::vector<double>& base, const std::vector<double>& change,
                               double level = 0.95);

}  // namespace mlarope::reports
