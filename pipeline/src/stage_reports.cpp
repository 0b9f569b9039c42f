#include "actkit/pipeline/stage_reports.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "actkit/core/errors.h"

namespace actkit::pipeline {
namespace {

using nlohmann::json;

std::vector<uint8_t> bytes_of(const json& j) {
  const std::string text = j.dump();
  return {text.begin(), text.end()};
}

json summary_json(const StageSummary& s) {
  return {{"stage", s.stage},
          {"first_piece", s.first_piece},
          {"end_piece", s.end_piece},
          {"parameters", s.parameters},
          {"peak_memory_bytes", s.peak_memory_bytes},
          {"tied_bytes", s.tied_bytes},
          {"buffer_bytes_stored", s.buffer_bytes_stored},
          {"buffer_bytes_per_example", s.buffer_bytes_per_example},
          {"buffer_bytes_read", s.buffer_bytes_read},
          {"buffer_bytes_written", s.buffer_bytes_written},
          {"buffer_wait_seconds", s.buffer_wait_seconds},
          {"exchange_bytes", s.exchange_bytes}};
}

StageSummary summary_of(const json& j) {
  StageSummary s;
  j.at("stage").get_to(s.stage);
  j.at("first_piece").get_to(s.first_piece);
  j.at("end_piece").get_to(s.end_piece);
  j.at("parameters").get_to(s.parameters);
  j.at("peak_memory_bytes").get_to(s.peak_memory_bytes);
  j.at("tied_bytes").get_to(s.tied_bytes);
  j.at("buffer_bytes_stored").get_to(s.buffer_bytes_stored);
  j.at("buffer_bytes_per_example").get_to(s.buffer_bytes_per_example);
  j.at("buffer_bytes_read").get_to(s.buffer_bytes_read);
  j.at("buffer_bytes_written").get_to(s.buffer_bytes_written);
  j.at("buffer_wait_seconds").get_to(s.buffer_wait_seconds);
  j.at("exchange_bytes").get_to(s.exchange_bytes);
  return s;
}

json link_json(const LinkReport& l) {
  return {{"from", l.from},   {"to", l.to},           {"forward", l.forward},
          {"bytes", l.bytes}, {"wait_seconds", l.wait_seconds}, {"raw_bytes", l.raw_bytes}};
}

LinkReport link_of(const json& j) {
  LinkReport l;
  j.at("from").get_to(l.from);
  j.at("to").get_to(l.to);
  j.at("forward").get_to(l.forward);
  j.at("bytes").get_to(l.bytes);
  j.at("wait_seconds").get_to(l.wait_seconds);
  j.at("raw_bytes").get_to(l.raw_bytes);
  return l;
}

// A report from `peer`, parsed; throws CommError naming it for anything
// that is not one.
json parse_report(const std::vector<uint8_t>& bytes, const std::string& what, int peer) {
  try {
    return json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    throw CommError(c10::str(what, " from rank ", peer, " is malformed: ", e.what()), peer);
  }
}

}  // namespace

double relay_to_first(Communicator& comm, int stage, int stages, double value, const std::string& what) {
  const int last = stages - 1;
  if (stages == 1) return value;
  if (stage == last) {
    comm.send(0, kReports, bytes_of(json{{"value", value}}));
    return value;
  }
  if (stage != 0) return value;
  const json j = parse_report(comm.recv(last, kReports, what), what, last);
  if (!j.is_object() || !j.contains("value") || !j["value"].is_number()) {
    throw CommError(c10::str("rank 0: rank ", last, " sent a malformed ", what), last);
  }
  return j["value"].get<double>();
}

std::pair<std::vector<LinkReport>, std::vector<StageSummary>> gather_reports(
    Communicator& comm, int stage, int stages, const std::vector<LinkReport>& links, const StageSummary& summary) {
  if (stage != 0) {
    json jl = json::array();
    for (const auto& l : links) jl.push_back(link_json(l));
    comm.send(0, kReports, bytes_of(json{{"summary", summary_json(summary)}, {"links", jl}}));
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
      StageSummary s = summary_of(j.at("summary"));
      if (s.stage != r) throw CommError(c10::str("rank 0: rank ", r, " reported itself as stage ", s.stage), r);
      stages_out.push_back(s);
      for (const auto& l : j.at("links")) merge(link_of(l));
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
