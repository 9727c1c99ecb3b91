// SPDX-License-Identifier: Apache-2.0
// Small inline SVG charts for the report page.
#pragma once

#include <string>
#include <vector>

namespace mlarope::reports {

/// One named series of values, one per category.
struct Series {
  std::string name;
  std::vector<double> values;  ///< NaN = no value
};

/// A grouped bar chart: categories along x, one bar per series, a labelled y axis with ticks.
/// `reference_line` > 0 draws a dashed horizontal line there (e.g. 1.0 = the copy floor);
/// `log_scale` plots log10(1 + value) with decade ticks (for counts spanning decades).
std::string bar_chart(const std::string& title, const std::vector<std::string>& categories,
                      const std::vector<Series>& series, const std::string& x_label,
                      const std::string& y_label, double reference_line = 0,
                      bool log_scale = false);

/// A line chart: points along x (in order, evenly spaced), one line per series (a NaN value
/// breaks its line). `flagged[s][i]` marks series s's point i with a red ring (a point a gate
/// flagged); empty when nothing is flagged.
std::string line_chart(const std::string& title, const std::vector<std::string>& points,
                       const std::vector<Series>& series,
                       const std::vector<std::vector<bool>>& flagged, const std::string& x_label,
                       const std::string& y_label);

/// Escape text for HTML and SVG.
std::string escape(const std::string& text);

/// `x` with `digits` decimals ("0.857").
std::string fixed(double x, int digits);

}  // namespace mlarope::reports
