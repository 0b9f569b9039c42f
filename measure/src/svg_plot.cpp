#include "actkit/measure/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"

namespace actkit {
namespace {

constexpr double kWidth = 720, kHeight = 440, kLeft = 70, kRight = 150, kTop = 40, kBottom = 55;
const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace

void write_svg_line_plot(const std::string& path, const std::string& title, const std::string& x_label,
                         const std::string& y_label, const std::vector<PlotSeries>& series) {
  double x_max = 1, y_max = 0;
  bool any = false;
  for (const auto& s : series) {
    for (auto [x, y] : s.points) {
      x_max = std::max(x_max, x);
      y_max = std::max(y_max, y);
      any = true;
    }
  }
  if (!any) throw Error("plot: nothing to draw");
  const double lx_max = std::max(1.0, std::ceil(std::log2(x_max)));
  y_max = y_max > 0 ? y_max * 1.1 : 1;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + pw * std::log2(std::max(x, 1.0)) / lx_max; };
  auto py = [&](double y) { return kTop + ph * (1 - y / y_max); };

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << kWidth / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << escape(title)
    << "</text>\n";
  o << "<line x1=\"" << kLeft << "\" y1=\"" << kTop + ph << "\" x2=\"" << kLeft + pw << "\" y2=\"" << kTop + ph
    << "\" stroke=\"black\"/>\n<line x1=\"" << kLeft << "\" y1=\"" << kTop << "\" x2=\"" << kLeft << "\" y2=\""
    << kTop + ph << "\" stroke=\"black\"/>\n";
  for (int e = 0; e <= int(lx_max); ++e) {  // x ticks at powers of two
    const double x = px(std::pow(2.0, e));
    o << "<line x1=\"" << x << "\" y1=\"" << kTop + ph << "\" x2=\"" << x << "\" y2=\"" << kTop + ph + 5
      << "\" stroke=\"black\"/><text x=\"" << x << "\" y=\"" << kTop + ph + 18 << "\" text-anchor=\"middle\">"
      << (1LL << e) << "</text>\n";
  }
  for (int t = 0; t <= 5; ++t) {
    const double v = y_max / 1.1 * t / 5, y = py(v);
    o << "<line x1=\"" << kLeft - 5 << "\" y1=\"" << y << "\" x2=\"" << kLeft + pw << "\" y2=\"" << y
      << "\" stroke=\"#ddd\"/><text x=\"" << kLeft - 8 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
      << (v >= 100 ? std::to_string(int(std::lround(v))) : std::to_string(std::lround(v * 10) / 10.0).substr(0, 4))
      << "</text>\n";
  }
  o << "<text x=\"" << kLeft + pw / 2 << "\" y=\"" << kHeight - 15 << "\" text-anchor=\"middle\">" << escape(x_label)
    << "</text>\n<text transform=\"translate(18," << kTop + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << escape(y_label) << "</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const auto& s = series[i];
    const char* color = kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
    auto pts = s.points;
    std::sort(pts.begin(), pts.end());
    if (!pts.empty()) {
      o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
      for (auto [x, y] : pts) o << px(x) << "," << py(y) << " ";
      o << "\"/>\n";
      for (auto [x, y] : pts) o << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"3\" fill=\"" << color << "\"/>\n";
    }
    const double ly = kTop + 10 + 20 * double(i);
    o << "<line x1=\"" << kWidth - kRight + 15 << "\" y1=\"" << ly << "\" x2=\"" << kWidth - kRight + 40 << "\" y2=\""
      << ly << "\" stroke=\"" << color << "\" stroke-width=\"2\"/><text x=\"" << kWidth - kRight + 46 << "\" y=\""
      << ly + 4 << "\">" << escape(s.name) << "</text>\n";
  }
  o << "</svg>\n";
  const std::string text = o.str();
  files::write_output_file(path, text.data(), text.size());
}

}  // namespace actkit
