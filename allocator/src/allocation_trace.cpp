#include "actkit/allocator/allocation_trace.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "actkit/core/errors.h"

namespace actkit {

int64_t AllocationTrace::peak_live_bytes() const {
  std::unordered_map<uint64_t, int64_t> live;
  int64_t now = 0, peak = 0;
  for (const TraceEvent& e : events) {
    if (!e.is_free()) {
      live[e.id] = e.bytes;
      now += e.bytes;
      peak = std::max(peak, now);
    } else if (auto it = live.find(e.id); it != live.end()) {
      now -= it->second;
      live.erase(it);
    }
  }
  return peak;
}

void AllocationTrace::save(const std::string& path) const {
  std::ofstream out(path);
  if (!out) throw IoError(c10::str("cannot write ", path, ": ", std::strerror(errno)), errno);
  out << "# actkit allocation trace " << name << "\n";
  for (const TraceEvent& e : events) {
    if (e.is_free()) {
      out << "f " << e.id << "\n";
    } else {
      out << "a " << e.id << " " << e.bytes << "\n";
    }
  }
  if (!out) throw IoError(c10::str("write to ", path, " failed"), errno);
}

AllocationTrace AllocationTrace::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError(c10::str("cannot read ", path, ": ", std::strerror(errno)), errno);
  AllocationTrace t;
  std::string line;
  const std::string header = "# actkit allocation trace ";
  if (!std::getline(in, line) || line.rfind(header, 0) != 0) {
    throw FormatError(c10::str(path, ": not an actkit allocation trace"));
  }
  t.name = line.substr(header.size());
  for (int64_t n = 2; std::getline(in, line); ++n) {
    std::istringstream ss(line);
    std::string kind, rest;
    TraceEvent e;
    ss >> kind >> e.id;
    if (kind == "a") ss >> e.bytes;
    if (ss.fail() || (kind != "a" && kind != "f") || (kind == "a" && e.bytes < 0) || (ss >> rest)) {
      throw FormatError(c10::str(path, ":", n, ": malformed event '", line, "'"));
    }
    if (kind == "f") e.bytes = -1;
    t.events.push_back(e);
  }
  return t;
}

BlockStats replay(const AllocationTrace& trace, BlockAllocator& allocator) {
  std::unordered_map<uint64_t, uint64_t> address;  // trace id -> replayed address
  for (const TraceEvent& e : trace.events) {
    if (!e.is_free()) {
      address[e.id] = allocator.allocate(uint64_t(e.bytes));
    } else if (auto it = address.find(e.id); it != address.end()) {
      allocator.free(it->second);
      address.erase(it);
    }
  }
  const BlockStats stats = allocator.stats();
  for (auto& [id, addr] : address) allocator.free(addr);
  return stats;
}

}  // namespace actkit
