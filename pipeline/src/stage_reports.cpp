#include "actkit/pipeline/stage_reports.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "actkit/core/errors.h"
#include "report_json.h"

namespace actkit::pipeline {

// The reports' fields by name (nlohmann's to_json / from_json, found by
// argument-dependent lookup).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(LinkReport, from, to, forward, bytes, wait_seconds, raw_bytes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(StageSummary, stage, first_piece, end_piece, parameters, peak_memory_bytes,
                                   tied_bytes, buffer_bytes_stored, buffer_bytes_per_example, buffer_bytes_read,
                                   buffer_bytes_written, buffer_wait_seconds, exchange_bytes)

namespace {

using nlohmann::json;

std::vector<uint8_t> bytes_of(const json& j) {
  const std::string text = j.dump();
  return {text.begin(), text.end()};
}

}  // namespace

nlohmann::json parse_report(const std::vector<uint8_t>& bytes, const std::string& what, int peer) {
  try {
    return nlohmann::json::parse(bytes.begin(), bytes.end());
  } catch (const nlohmann::json::exception& e) {
    throw CommError(c10::str(what, " from rank ", peer, " is malformed: ", e.what()), peer);
  }
}

double relay_to_first(Communicator& comm, int stage, int stages, double value, const std::string& what) {
  return relay_to_first(comm, stage, stages, std::vector<double>{value}, 1, what)[0];
}

std::vector<double> relay_to_first(Communicator& comm, int stage, int stages, const std::vector<double>& values,
                                   int64_t count, const std::string& what) {
  // The doubles' own bytes: a diverged run's NaN or Inf must reach rank 0
  // as it is (JSON has no such numbers).
  if (count < 0 || count > kMaxReportBytes / int64_t(sizeof(double))) {
    throw InvalidInput(c10::str(what, ": ", count, " values to relay"));
  }
  const int last = stages - 1;
  if (stages == 1 || (stage != 0 && stage != last)) return values;
  const size_t size = size_t(count) * sizeof(double);
  if (stage == last) {
    if (int64_t(values.size()) != count) throw InvalidInput(c10::str(what, ": ", values.size(), " values, not ", count));
    std::vector<uint8_t> bytes(size);
    std::memcpy(bytes.data(), values.data(), size);
    comm.send(0, kReports, bytes);
    return values;
  }
  const std::vector<uint8_t> bytes = comm.recv(last, kReports, what);
  if (bytes.size() != size) {
    throw CommError(c10::str("rank 0: ", what, " from rank ", last, " is ", bytes.size(), " bytes, not ", count,
                             " number(s)"), last);
  }
  std::vector<double> received(size_t(count), 0.0);
  std::memcpy(received.data(), bytes.data(), size);
  return received;
}

std::pair<std::vector<LinkReport>, std::vector<StageSummary>> gather_reports(
    Communicator& comm, int stage, int stages, const std::vector<LinkReport>& links, const StageSummary& summary) {
  if (stage != 0) {
    comm.send(0, kReports, bytes_of(json{{"summary", summary}, {"links", links}}));
    comm.flush();
    return {};
  }
  std::vector<StageSummary> stages_out{summary};
  std::map<std::tuple<int, int, bool>, LinkReport> merged;
  auto merge = [&](const LinkReport& l) {
    LinkReport& m = merged[{l.from, l.to, l.forward}];
    m.from = l.from;
    m.to = l.to;
    m.forward = l.forward;
    m.bytes += l.bytes;
    m.wait_seconds += l.wait_seconds;
    m.raw_bytes += l.raw_bytes;
  };
  for (const auto& l : links) merge(l);
  for (int r = 1; r < stages; ++r) comm.expect(r, kReports, 1, kMaxReportBytes);
  for (int r = 1; r < stages; ++r) {
    const json j = parse_report(comm.recv(r, kReports, "the end-of-run report"), "the end-of-run report", r);
    try {
      const StageSummary s = j.at("summary").get<StageSummary>();
      if (s.stage != r) throw CommError(c10::str("rank 0: rank ", r, " reported itself as stage ", s.stage), r);
      stages_out.push_back(s);
      for (const auto& l : j.at("links")) merge(l.get<LinkReport>());
    } catch (const json::exception& e) {
      throw CommError(c10::str("rank 0: rank ", r, " sent a malformed end-of-run report: ", e.what()), r);
    }
  }
  std::vector<LinkReport> out;
  for (const auto& [key, l] : merged) out.push_back(l);
  std::sort(out.begin(), out.end(), [](const LinkReport& a, const LinkReport& b) {
    return std::make_tuple(!a.forward, std::min(a.from, a.to)) < std::make_tuple(!b.forward, std::min(b.from, b.to));
  });
  return {out, stages_out};
}

}  // namespace actkit::pipeline
