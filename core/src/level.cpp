#include "actkit/core/level.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <sstream>

#include "actkit/core/device.h"
#include "actkit/core/errors.h"

namespace actkit {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

bool parse_bool(const std::string& key, const std::string& v) {
  const std::string l = lower(v);
  if (l == "true" || l == "1" || l == "on" || l == "yes") return true;
  if (l == "false" || l == "0" || l == "off" || l == "no") return false;
  throw InvalidInput(c10::str("level override ", key, "=", v, ": expected true or false"));
}

// The value of `choices` whose name is `v` (any case). Throws InvalidInput
// listing the names.
template <typename T>
T parse_choice(const std::string& key, const std::string& v,
               std::initializer_list<std::pair<const char*, T>> choices) {
  std::string names;
  for (const auto& [name, value] : choices) {
    if (lower(v) == name) return value;
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  throw InvalidInput(c10::str("level override ", key, "=", v, ": expected one of ", names));
}

// The number at the start of `text`; *used = characters it took (0: none).
double leading_number(const std::string& text, size_t* used) {
  *used = 0;
  try {
    return std::stod(text, used);
  } catch (const std::exception&) {
    *used = 0;
    return 0;
  }
}

double parse_number(const std::string& key, const std::string& v) {
  size_t used = 0;
  const double d = leading_number(v, &used);
  if (used != v.size() || v.empty() || !std::isfinite(d)) {
    throw InvalidInput(c10::str("level override ", key, "=", v, ": not a number"));
  }
  return d;
}

void check(const LevelConfig& c) {
  if (c.compresses_anything()) {
    if (!(c.bits >= 1 && c.bits <= 8)) throw InvalidInput(c10::str("bits must be in [1, 8], got ", c.bits));
    if (!c.mixed_precision && c.bits != std::floor(c.bits)) {
      throw InvalidInput(c10::str("fractional bits (", c.bits, ") need mixed_precision=true (L3 and up)"));
    }
  }
  if (c.group_size < 8 || c.group_size > 4096 || c.group_size % 8 != 0) {
    throw InvalidInput(c10::str("group_size must be a multiple of 8 in [8, 4096], got ", c.group_size));
  }
}

}  // namespace

int64_t parse_byte_size(const std::string& text) {
  size_t used = 0;
  const double v = leading_number(text, &used);
  std::string unit = lower(text.substr(used));
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'i') unit.pop_back();
  double scale = 0;
  if (unit.empty()) scale = 1;
  else if (unit == "k") scale = 1024.0;
  else if (unit == "m") scale = 1024.0 * 1024;
  else if (unit == "g") scale = 1024.0 * 1024 * 1024;
  else if (unit == "t") scale = 1024.0 * 1024 * 1024 * 1024;
  if (used == 0 || scale == 0 || !std::isfinite(v) || v < 0 || v * scale > 9.0e18) {
    throw InvalidInput(c10::str("'", text, "' is not a size (examples: 1073741824, 512M, 1.5G, 1GiB)"));
  }
  return int64_t(std::llround(v * scale));
}

int64_t chunk_bytes_for(const LevelConfig& config, at::Device device) {
  constexpr int64_t kCpuPiece = int64_t(16) << 20;
  if (config.chunk_bytes != kChunkBytesAuto) return config.chunk_bytes;
  if (!device.is_cuda()) return kCpuPiece;
  return std::max(kCpuPiece, device_total_bytes(device) / 32);
}

LevelConfig level_preset(const std::string& name) {
  const std::string n = lower(name);
  LevelConfig c;
  if (n.size() != 2 || n[0] != 'l' || n[1] < '0' || n[1] > '5') {
    throw InvalidInput(c10::str("unknown level '", name, "' (expected L0, L1, L2, L3, L4 or L5)"));
  }
  const int level = n[1] - '0';
  c.level = "L" + std::to_string(level);
  c.spec = c.level;
  if (level >= 1) {
    c.compress_conv = true;
    c.bits = 4;
  }
  if (level >= 2) c.compress_linear = c.compress_norm = c.compress_activation = true;
  if (level >= 3) {
    c.bits = 2;
    c.mixed_precision = true;
  }
  if (level >= 4) c.swap = SwapTarget::kHost;
  if (level >= 5) c.defrag_allocator = true;
  return c;
}

namespace {
// A size override's value; the error names the override.
int64_t parse_size_override(const std::string& key, const std::string& v) {
  try {
    return parse_byte_size(v);
  } catch (const InvalidInput& e) {
    throw InvalidInput(c10::str("level override ", key, "=", v, ": ", e.what()));
  }
}
}  // namespace

LevelConfig with_overrides(LevelConfig c, const std::vector<std::string>& overrides) {
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos) throw InvalidInput(c10::str("level override '", o, "': expected key=value"));
    const std::string key = lower(o.substr(0, eq));
    const std::string v = o.substr(eq + 1);
    if (key == "bits") {
      c.bits = parse_number(key, v);
    } else if (key == "group_size") {
      const double g = parse_number(key, v);
      if (g != std::floor(g)) throw InvalidInput(c10::str("level override group_size=", v, ": not an integer"));
      c.group_size = int(g);
    } else if (key == "conv") {
      c.compress_conv = parse_bool(key, v);
    } else if (key == "linear") {
      c.compress_linear = parse_bool(key, v);
    } else if (key == "norm") {
      c.compress_norm = parse_bool(key, v);
    } else if (key == "activation") {
      c.compress_activation = parse_bool(key, v);
    } else if (key == "mixed_precision") {
      c.mixed_precision = parse_bool(key, v);
    } else if (key == "swap") {
      c.swap = parse_choice(key, v, {std::pair{"none", SwapTarget::kNone}, {"host", SwapTarget::kHost},
                                     {"file", SwapTarget::kFile}});
    } else if (key == "host_budget") {
      c.host_budget = parse_size_override(key, v);
    } else if (key == "swap_dir") {
      if (v.empty()) throw InvalidInput("level override swap_dir: empty directory");
      c.swap_dir = v;
    } else if (key == "prefetch") {
      const double d = parse_number(key, v);
      if (d != std::floor(d) || d < 0 || d > 64) throw InvalidInput(c10::str("level override prefetch=", v, ": expected 0..64"));
      c.prefetch = int(d);
    } else if (key == "chunk_bytes") {
      c.chunk_bytes = v == "auto" ? kChunkBytesAuto : parse_size_override(key, v);
    } else if (key == "defrag") {
      c.defrag_allocator = parse_bool(key, v);
    } else if (key == "grads") {
      c.gradients = parse_choice(key, v, {std::pair{"keep", GradientMemory::kKeep}, {"drop", GradientMemory::kDrop},
                                          {"auto", GradientMemory::kAuto}});
    } else {
      throw InvalidInput(c10::str("unknown level override '", key,
                                  "' (bits, group_size, conv, linear, norm, activation, mixed_precision, swap, host_budget, swap_dir, prefetch, chunk_bytes, defrag, grads)"));
    }
  }
  // Turning a layer kind on from L0 without naming bits gives the L1/L2 width.
  if (c.compresses_anything() && c.bits == 32) c.bits = 4;
  check(c);
  return c;
}

LevelConfig parse_level(const std::string& spec) {
  const size_t colon = spec.find(':');
  LevelConfig c = level_preset(spec.substr(0, colon));
  std::vector<std::string> overrides;
  if (colon != std::string::npos) {
    std::stringstream ss(spec.substr(colon + 1));
    for (std::string item; std::getline(ss, item, ',');) {
      if (!item.empty()) overrides.push_back(item);
    }
  }
  c = with_overrides(c, overrides);
  if (colon != std::string::npos) c.spec = c.level + spec.substr(colon);
  return c;
}

namespace {

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// Whether `part` of a level list begins a level: "L3", "l3:bits=2".
bool starts_level(const std::string& part) {
  return part.size() >= 2 && (part[0] == 'L' || part[0] == 'l') && part[1] >= '0' && part[1] <= '5' &&
         (part.size() == 2 || part[2] == ':');
}

}  // namespace

std::vector<LevelConfig> parse_level_list(const std::string& list) {
  std::vector<std::string> specs;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    const std::string part = trimmed(item);
    if (part.empty()) continue;
    if (starts_level(part) || specs.empty()) {
      specs.push_back(part);
    } else {
      // An override of the level before: "L0,bits=2" is "L0:bits=2".
      specs.back() += (specs.back().find(':') == std::string::npos ? ":" : ",") + part;
    }
  }
  if (specs.empty()) throw InvalidInput("the list of levels is empty");
  std::vector<LevelConfig> levels;
  for (const std::string& s : specs) levels.push_back(parse_level(s));
  return levels;
}

std::string describe(const LevelConfig& c) {
  const char* grads = c.gradients == GradientMemory::kKeep ? " grads=keep"
                      : c.gradients == GradientMemory::kDrop ? " grads=drop" : "";
  if (!c.compresses_anything()) return c.level + " (fp32" + grads + ")";
  std::string kinds;
  auto add = [&](bool on, const char* k) {
    if (!on) return;
    if (!kinds.empty()) kinds += ",";
    kinds += k;
  };
  add(c.compress_conv, "conv");
  add(c.compress_linear, "linear");
  add(c.compress_norm, "norm");
  add(c.compress_activation, "act");
  std::ostringstream os;
  os << c.level << " (bits=" << c.bits << (c.mixed_precision ? " mixed " : " ") << kinds;
  if (c.swap == SwapTarget::kHost) os << " swap=host";
  if (c.swap == SwapTarget::kFile) os << " swap=file";
  if (c.defrag_allocator) os << " defrag";
  os << grads;
  os << ")";
  return os.str();
}

}  // namespace actkit
