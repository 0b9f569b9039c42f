// A line chart written as SVG, with no plotting dependency: batch size vs
// throughput for `actkit maxbatch --plot` (ActNN's Fig. 1).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace actkit {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), x > 0
};

// Writes the chart to `path`, x on a log2 axis. Throws Error if the file
// cannot be written or no series has a point.
void write_svg_line_plot(const std::string& path, const std::string& title, const std::string& x_label,
                         const std::string& y_label, const std::vector<PlotSeries>& series);

}  // namespace actkit
