// SPDX-License-Identifier: Apache-2.0
#include "stats.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <utility>

namespace mlarope::reports {
namespace {

// How many of the C(N, n) ways of choosing n of `scores` give each sum (index = the sum).
// Counts are doubles: C(60, 30) ~ 1.2e17 is past 2^53, but only their ratios are used.
std::vector<double> sum_counts(const std::vector<int>& scores, int n) {
  const int total = std::accumulate(scores.begin(), scores.end(), 0);
  std::vector<std::vector<double>> ways(n + 1, std::vector<double>(total + 1, 0.0));
  ways[0][0] = 1;
  int seen = 0;
  for (const int w : scores) {
    ++seen;
    for (int k = std::min(seen, n); k >= 1; --k)
      for (int s = total; s >= w; --s) ways[k][s] += ways[k - 1][s - w];
  }
  return ways[n];
}

// Twice the midrank of each pooled value (an integer even with ties), x's first, then y's.
std::vector<int> doubled_midranks(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<std::pair<double, std::size_t>> pooled;
  for (std::size_t i = 0; i < x.size(); ++i) pooled.push_back({x[i], i});
  for (std::size_t i = 0; i < y.size(); ++i) pooled.push_back({y[i], x.size() + i});
  std::sort(pooled.begin(), pooled.end());
  std::vector<int> ranks(pooled.size());
  for (std::size_t i = 0; i < pooled.size();) {
    std::size_t j = i;
    while (j + 1 < pooled.size() && pooled[j + 1].first == pooled[i].first) ++j;
    for (std::size_t k = i; k <= j; ++k) ranks[pooled[k].second] = static_cast<int>(i + j + 2);
    i = j + 1;
  }
  return ranks;
}

}  // namespace

MannWhitney mann_whitney(const std::vector<double>& x, const std::vector<double>& y) {
  MannWhitney result;
  if (x.empty() || y.empty()) return result;
  const std::vector<int> ranks = doubled_midranks(x, y);
  const int n = static_cast<int>(x.size());
  const int observed = std::accumulate(ranks.begin(), ranks.begin() + n, 0);
  const std::vector<double> counts = sum_counts(ranks, n);
  double below = 0, above = 0, all = 0;
  for (std::size_t s = 0; s < counts.size(); ++s) {
    all += counts[s];
    if (static_cast<int>(s) <= observed) below += counts[s];
    if (static_cast<int>(s) >= observed) above += counts[s];
  }
  result.p_less = below / all;
  result.p_greater = above / all;
  return result;
}

double smallest_p(int n, int m) {
  if (n <= 0 || m <= 0) return 1;
  return std::exp(std::lgamma(n + 1.0) + std::lgamma(m + 1.0) - std::lgamma(n + m + 1.0));
}

std::vector<double> holm_adjust(const std::vector<double>& p) {
  std::vector<std::size_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return p[a] < p[b]; });
  std::vector<double> adjusted(p.size());
  double running = 0;
  for (std::size_t rank = 0; rank < order.size(); ++rank) {
    const double scaled = std::min(1.0, static_cast<double>(p.size() - rank) * p[order[rank]]);
    running = std::max(running, scaled);  // adjusted values never fall as p grows
    adjusted[order[rank]] = running;
  }
  return adjusted;
}

double median(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

RelativeChange relative_change(const std::vector<double>& base, const std::vector<double>& change,
                               double level) {
  RelativeChange r;
  if (base.empty() || change.empty()) return r;
  std::vector<double> shifts;  // every pairwise log ratio, sorted
  for (const double c : change)
    for (const double b : base) shifts.push_back(std::log(c) - std::log(b));
  std::sort(shifts.begin(), shifts.end());
  r.estimate = std::expm1(median(shifts));
  // The interval's ends are the c-th smallest and largest shifts, c the largest count with
  // P(U < c) <= (1 - level) / 2 under the null (U the Mann-Whitney count, ranks without ties).
  const int n = static_cast<int>(change.size()), m = static_cast<int>(base.size());
  std::vector<int> scores(n + m);
  std::iota(scores.begin(), scores.end(), 1);
  const std::vector<double> counts = sum_counts(scores, n);
  const int offset = n * (n + 1) / 2;  // the smallest rank sum: U = sum - offset
  const double all = std::accumulate(counts.begin(), counts.end(), 0.0);
  const double tail = (1 - level) / 2;
  int c = 1;
  double below = counts[offset] / all;  // P(U < c) for c = 1
  for (int next = 2; next <= static_cast<int>(shifts.size()) / 2; ++next) {
    const double wider = below + counts[offset + next - 1] / all;
    if (wider > tail) break;
    c = next, below = wider;
  }
  // Where even c = 1 misses the level, the widest interval is what there is; say what it is.
  r.confidence = 1 - 2 * below;
  r.lower = std::expm1(shifts[c - 1]);
  r.upper = std::expm1(shifts[shifts.size() - c]);
  return r;
}

}  // namespace mlarope::reports
