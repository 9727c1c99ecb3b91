// SPDX-License-Identifier: Apache-2.0
#include "svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace mlarope::reports {
namespace {

const char* const kColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1"};

// A "nice" axis maximum and tick step for values up to `max_value`.
std::pair<double, double> axis_scale(double max_value) {
  if (!(max_value > 0)) max_value = 1;
  const double magnitude = std::pow(10.0, std::floor(std::log10(max_value)));
  for (double step : {0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0}) {
    const double s = step * magnitude;
    if (max_value / s <= 6) return {std::ceil(max_value / s - 1e-9) * s, s};
  }
  return {max_value, max_value / 5};
}

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

}  // namespace

std::string fixed(double x, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string bar_chart(const std::string& title, const std::vector<std::string>& categories,
                      const std::vector<Series>& series, const std::string& x_label,
                      const std::string& y_label, double reference_line, bool log_scale) {
  const double left = 70, right = 20, top = 56, bottom = 150;
  const double group_width = std::max(40.0, 18.0 * series.size() + 16);
  const double plot_w = std::max(380.0, group_width * std::max<std::size_t>(1, categories.size()));
  const double plot_h = 220, width = left + plot_w + right, height = top + plot_h + bottom;
  auto scaled = [&](double v) { return log_scale ? std::log10(1 + std::max(0.0, v)) : v; };
  double max_value = reference_line;
  for (const Series& s : series)
    for (double v : s.values)
      if (std::isfinite(v)) max_value = std::max(max_value, scaled(v));
  // Named locals, not a structured binding: the lambdas below capture axis_max.
  const std::pair<double, double> scale = axis_scale(max_value);
  double axis_max = scale.first, step = scale.second;
  if (log_scale) axis_max = std::max(1.0, std::ceil(max_value)), step = 1;
  auto y_of = [&](double v) { return top + plot_h - plot_h * scaled(v) / axis_max; };
  auto y_of_axis = [&](double a) { return top + plot_h - plot_h * a / axis_max; };

  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
      << "' font-family='sans-serif' font-size='11'>\n";
  svg << "<text x='" << left << "' y='20' font-size='14' font-weight='bold'>" << escape(title)
      << "</text>\n";
  for (double a = 0; a <= axis_max + 1e-12; a += step) {  // grid and tick labels
    const std::string label = log_scale ? (a == 0 ? "0" : "1e" + number(a)) : number(a);
    svg << "<line x1='" << left << "' x2='" << left + plot_w << "' y1='" << y_of_axis(a) << "' y2='"
        << y_of_axis(a) << "' stroke='#ddd'/>\n<text x='" << left - 6 << "' y='" << y_of_axis(a) + 4
        << "' text-anchor='end'>" << label << "</text>\n";
  }
  if (reference_line > 0)
    svg << "<line x1='" << left << "' x2='" << left + plot_w << "' y1='" << y_of(reference_line)
        << "' y2='" << y_of(reference_line) << "' stroke='#c00' stroke-dasharray='5,3'/>\n";
  for (std::size_t c = 0; c < categories.size(); ++c) {
    const double x0 = left + c * group_width + 8;
    for (std::size_t s = 0; s < series.size(); ++s) {
      const double v = c < series[s].values.size() ? series[s].values[c] : NAN;
      if (!std::isfinite(v)) continue;
      const double x = x0 + s * 18;
      svg << "<rect x='" << x << "' y='" << y_of(v) << "' width='16' height='" << y_of(0) - y_of(v)
          << "' fill='" << kColors[s % 6] << "'><title>" << escape(series[s].name) << " "
          << escape(categories[c]) << ": " << number(v) << "</title></rect>\n";
    }
    const double label_x = left + c * group_width + group_width / 2;
    svg << "<text transform='translate(" << label_x << "," << top + plot_h + 12
        << ") rotate(40)' text-anchor='start'>" << escape(categories[c]) << "</text>\n";
  }
  svg << "<line x1='" << left << "' x2='" << left << "' y1='" << top << "' y2='" << top + plot_h
      << "' stroke='#333'/>\n<line x1='" << left << "' x2='" << left + plot_w << "' y1='"
      << top + plot_h << "' y2='" << top + plot_h << "' stroke='#333'/>\n";
  svg << "<text transform='translate(16," << top + plot_h / 2
      << ") rotate(-90)' text-anchor='middle'>" << escape(y_label) << "</text>\n";
  svg << "<text x='" << left + plot_w / 2 << "' y='" << height - 8 << "' text-anchor='middle'>"
      << escape(x_label) << "</text>\n";
  for (std::size_t s = 0; s < series.size(); ++s) {  // legend, under the title
    const double x = left + s * 110;
    svg << "<rect x='" << x << "' y='30' width='12' height='12' fill='" << kColors[s % 6]
        << "'/><text x='" << x + 16 << "' y='40'>" << escape(series[s].name) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

std::string line_chart(const std::string& title, const std::vector<std::string>& points,
                       const std::vector<Series>& series,
                       const std::vector<std::vector<bool>>& flagged, const std::string& x_label,
                       const std::string& y_label) {
  const double left = 70, right = 20, top = 40, plot_h = 220;
  const double step_x = std::max(40.0, 560.0 / std::max<std::size_t>(1, points.size()));
  const double plot_w = step_x * std::max<std::size_t>(1, points.size());
  const double legend_top = top + plot_h + 70;
  const double height = legend_top + 16.0 * series.size() + 24, width = left + plot_w + right + 200;
  double max_value = 0;
  for (const Series& s : series)
    for (double v : s.values)
      if (std::isfinite(v)) max_value = std::max(max_value, v);
  // Named locals, not a structured binding: the lambdas below capture axis_max.
  const std::pair<double, double> scale = axis_scale(max_value);
  const double axis_max = scale.first, step = scale.second;
  auto x_of = [&](std::size_t i) { return left + step_x * (static_cast<double>(i) + 0.5); };
  auto y_of = [&](double v) { return top + plot_h - plot_h * v / axis_max; };

  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
      << "' font-family='sans-serif' font-size='11'>\n";
  svg << "<text x='" << left << "' y='20' font-size='14' font-weight='bold'>" << escape(title)
      << "</text>\n";
  for (double a = 0; a <= axis_max + 1e-12; a += step)
    svg << "<line x1='" << left << "' x2='" << left + plot_w << "' y1='" << y_of(a) << "' y2='"
        << y_of(a) << "' stroke='#ddd'/>\n<text x='" << left - 6 << "' y='" << y_of(a) + 4
        << "' text-anchor='end'>" << number(a) << "</text>\n";
  for (std::size_t i = 0; i < points.size(); ++i)
    svg << "<text transform='translate(" << x_of(i) << "," << top + plot_h + 12
        << ") rotate(40)' text-anchor='start'>" << escape(points[i]) << "</text>\n";
  for (std::size_t s = 0; s < series.size(); ++s) {
    const char* color = kColors[s % 6];
    const char* dash = s / 6 % 2 ? " stroke-dasharray='5,3'" : "";
    std::string path;
    for (std::size_t i = 0; i < series[s].values.size() && i < points.size(); ++i) {
      const double v = series[s].values[i];
      if (!std::isfinite(v)) {
        path += " ";  // a gap: the next point starts a new piece
        continue;
      }
      path += (path.empty() || path.back() == ' ' ? "M" : "L") + number(x_of(i)) + "," +
              number(y_of(v)) + " ";
    }
    svg << "<path d='" << path << "' fill='none' stroke='" << color << "' stroke-width='1.5'"
        << dash << "/>\n";
    for (std::size_t i = 0; i < series[s].values.size() && i < points.size(); ++i) {
      const double v = series[s].values[i];
      if (!std::isfinite(v)) continue;
      const bool flag = s < flagged.size() && i < flagged[s].size() && flagged[s][i];
      svg << "<circle cx='" << x_of(i) << "' cy='" << y_of(v) << "' r='" << (flag ? 6 : 3)
          << "' fill='" << (flag ? "none" : color) << "' stroke='" << (flag ? "#d00" : color)
          << "' stroke-width='" << (flag ? 2.5 : 1) << "'><title>" << escape(series[s].name)
          << " at " << escape(points[i]) << ": " << number(v)
          << (flag ? " (flagged by the gate)" : "") << "</title></circle>\n";
    }
    svg << "<line x1='" << left << "' x2='" << left + 20 << "' y1='" << legend_top + 16.0 * s - 4
        << "' y2='" << legend_top + 16.0 * s - 4 << "' stroke='" << color << "' stroke-width='2'"
        << dash << "/><text x='" << left + 26 << "' y='" << legend_top + 16.0 * s << "'>"
        << escape(series[s].name) << "</text>\n";
  }
  svg << "<line x1='" << left << "' x2='" << left << "' y1='" << top << "' y2='" << top + plot_h
      << "' stroke='#333'/>\n<line x1='" << left << "' x2='" << left + plot_w << "' y1='"
      << top + plot_h << "' y2='" << top + plot_h << "' stroke='#333'/>\n";
  svg << "<text transform='translate(16," << top + plot_h / 2
      << ") rotate(-90)' text-anchor='middle'>" << escape(y_label) << "</text>\n<text x='"
      << left + plot_w / 2 << "' y='" << top + plot_h + 60 << "' text-anchor='middle'>"
      << escape(x_label) << "</text>\n</svg>\n";
  return svg.str();
}

}  // namespace mlarope::reports
