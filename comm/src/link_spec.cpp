#include "actkit/comm/link_spec.h"

#include <c10/util/StringUtil.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "actkit/core/enum_names.h"
#include "actkit/core/errors.h"

namespace actkit {

namespace {
constexpr EnumName<LinkMode> kLinkModeNames[] = {{LinkMode::kProcess, "process"}, {LinkMode::kKernel, "kernel"}};
}  // namespace

const char* to_string(LinkMode mode) { return enum_name(kLinkModeNames, mode); }

LinkMode parse_link_mode(const std::string& text) { return parse_enum(kLinkModeNames, text, "--link"); }
namespace {

// Splits "100Mbps" into 100 and "Mbps"; false when no number leads.
bool split_number(const std::string& text, double& value, std::string& unit) {
  const char* begin = text.c_str();
  char* end = nullptr;
  value = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(value)) return false;
  unit = std::string(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) parts.push_back(part);
  return parts;
}

template <typename Parse>
std::vector<double> parse_list(const std::string& text, size_t count, Parse parse, const char* what) {
  const auto parts = split_commas(text);
  if (parts.size() != 1 && parts.size() != count) {
    throw InvalidInput(c10::str(what, " '", text, "': give one value or ", count, " (one per link), got ",
                                parts.size()));
  }
  std::vector<double> values;
  for (const auto& p : parts) values.push_back(parse(p));
  if (values.size() == 1) values.assign(count, values[0]);
  return values;
}

}  // namespace

double parse_bandwidth(const std::string& text) {
  const std::string t = lower(text);
  if (t == "unlimited" || t == "0" || t == "none") return 0;
  double value = 0;
  std::string unit;
  struct Unit {
    const char* name;
    double scale;
  };
  static const Unit units[] = {{"bps", 1},      {"kbps", 1e3},    {"mbps", 1e6},   {"gbps", 1e9},
                               {"bit", 1},      {"kbit", 1e3},    {"mbit", 1e6},   {"gbit", 1e9},
                               {"bit/s", 1},    {"kbit/s", 1e3},  {"mbit/s", 1e6}, {"gbit/s", 1e9}};
  if (split_number(t, value, unit) && value > 0) {
    for (const auto& u : units) {
      if (unit == u.name) return value * u.scale;
    }
  }
  throw InvalidInput(c10::str("bandwidth '", text, "': expected a positive rate such as 100Mbps, 1Gbps, 800kbps ",
                              "(bits per second) or 'unlimited'"));
}

double parse_latency(const std::string& text) {
  const std::string t = lower(text);
  double value = 0;
  std::string unit;
  if (split_number(t, value, unit) && value >= 0) {
    if (unit == "s") return value;
    if (unit == "ms") return value * 1e-3;
    if (unit == "us") return value * 1e-6;
    if (unit.empty() && value == 0) return 0;
  }
  throw InvalidInput(c10::str("latency '", text, "': expected a duration such as 10ms, 0.5s, 250us or 0"));
}

std::vector<double> parse_bandwidth_list(const std::string& text, size_t count) {
  return parse_list(text, count, parse_bandwidth, "bandwidth");
}

std::vector<double> parse_latency_list(const std::string& text, size_t count) {
  return parse_list(text, count, parse_latency, "latency");
}

std::string format_bandwidth(double bps) {
  if (bps <= 0) return "unlimited";
  char buf[64];
  if (bps >= 1e9) {
    std::snprintf(buf, sizeof buf, "%g Gbit/s", bps / 1e9);
  } else if (bps >= 1e6) {
    std::snprintf(buf, sizeof buf, "%g Mbit/s", bps / 1e6);
  } else if (bps >= 1e3) {
    std::snprintf(buf, sizeof buf, "%g kbit/s", bps / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%g bit/s", bps);
  }
  return buf;
}

LinkPacer::Clock::time_point LinkPacer::reserve(size_t bytes, Clock::time_point now) {
  if (!spec_.limited()) return now;
  std::lock_guard<std::mutex> lock(mutex_);
  const Clock::time_point start = std::max(now, wire_free_);
  const double wire_s = spec_.bits_per_second > 0 ? double(bytes) * 8.0 / spec_.bits_per_second : 0.0;
  wire_free_ = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wire_s));
  return wire_free_ +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spec_.latency_seconds));
}

}  // namespace actkit
