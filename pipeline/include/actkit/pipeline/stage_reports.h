// What the stages of a pipeline tell rank 0: each step's loss, the
// validation loss, and at the end every link's traffic and every stage's
// summary, serialized by field name.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "actkit/comm/communicator.h"

namespace actkit::pipeline {

// Message channels between stages.
enum Channel : int {
  kActivations = 0,    // stage s -> s + 1
  kGradients = 1,      // stage s + 1 -> s
  kTiedGradients = 2,  // between the stages that share a parameter
  kReports = 3,        // to rank 0: losses and the end-of-run summary
  kBufferChecks = 4,   // aqsgd: the two sides of a boundary compare their m(ξ)
};

// Reports are a few numbers per link and stage.
constexpr int64_t kMaxReportBytes = int64_t(1) << 20;

// One directed link's traffic over the whole run.
struct LinkReport {
  int from = 0, to = 0;
  bool forward = true;
  int64_t bytes = 0;        // sent, size headers included
  double wait_seconds = 0;  // the receiver's time blocked on it
  int64_t raw_bytes = 0;    // what fp32 would have sent for the same tensors
};

struct StageSummary {
  int stage = 0;
  int first_piece = 0, end_piece = 0;
  int64_t parameters = 0;
  int64_t peak_memory_bytes = 0;
  int64_t tied_bytes = 0;  // sent to exchange a shared parameter's gradient (GPT-2's tied embedding)
  // aqsgd: this stage's buffer stores (one per boundary side it holds), summed.
  int64_t buffer_bytes_stored = 0;
  int64_t buffer_bytes_per_example = 0;  // one side's m(ξ) of one example
  int64_t buffer_bytes_read = 0, buffer_bytes_written = 0;  // file traffic
  double buffer_wait_seconds = 0;
  int64_t exchange_bytes = 0;  // replicas: what the optimizers' exchanges sent (Replication::exchange_bytes)
};

// `value` of the last stage (stage `stages` - 1) on rank 0: the last stage
// sends it, rank 0 returns what it received, every other rank (and a
// pipeline of one stage) returns `value` unchanged. The caller on rank 0
// must have announced the message (Communicator::expect). NaN and Inf
// arrive as they are. `what` names it in errors. Throws CommError naming
// the last stage for a malformed one.
double relay_to_first(Communicator& comm, int stage, int stages, double value, const std::string& what);
// The same for a vector of `count` values (at most kMaxReportBytes of them);
// a message of another length is a CommError.
std::vector<double> relay_to_first(Communicator& comm, int stage, int stages, const std::vector<double>& values,
                                   int64_t count, const std::string& what);

// Collects every stage's link reports and summary on rank 0: links merged
// per (from, to, direction) and sorted forward first by boundary, summaries
// in stage order. Other ranks send theirs and get empty lists. Every rank
// must call it. Throws CommError naming a rank whose report is malformed.
std::pair<std::vector<LinkReport>, std::vector<StageSummary>> gather_reports(
    Communicator& comm, int stage, int stages, const std::vector<LinkReport>& links, const StageSummary& summary);

}  // namespace actkit::pipeline
