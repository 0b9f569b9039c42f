// Pipeline schedules: the order in which one stage runs the forward and
// backward passes of a step's micro-batches.
//
// GPipe: every forward, then every backward (what the AQ-SGD and TAH-Quant
// code runs); a stage holds all M micro-batches' activations at the peak.
// 1F1B: after a warm-up of (K - 1 - stage) forwards, one forward then one
// backward; a stage holds at most K micro-batches' activations.
// Both give the same gradients: only the order of work changes.
#pragma once

#include <string>
#include <vector>

namespace actkit::pipeline {

enum class Schedule { kGPipe, k1F1B };

// "gpipe" or "1f1b" (any case). Throws InvalidInput naming both.
Schedule parse_schedule(const std::string& text);
const char* to_string(Schedule schedule);

struct StageOp {
  enum Kind { kForward, kBackward } kind;
  int micro_batch;
  bool operator==(const StageOp& o) const { return kind == o.kind && micro_batch == o.micro_batch; }
};

// The ops stage `stage` of `stages` runs in one step of `micro_batches`:
// every micro-batch's forward once and its backward once, the backward
// after the forward, micro-batches in order within each kind.
// `in_flight` (1F1B only; 0 = `stages`): stage 0 holds up to that many
// micro-batches' activations, stage s up to in_flight - s. More than
// `stages` lets the forwards run further ahead, which hides a slow link's
// round trip (activations out, gradients back) behind computation at the
// cost of that many more micro-batches' activations. Throws InvalidInput
// for stage outside [0, stages), a count < 1, or 0 < in_flight < stages.
std::vector<StageOp> stage_ops(Schedule schedule, int stage, int stages, int micro_batches, int in_flight = 0);

// The largest number of micro-batches whose activations the stage holds at
// once under `ops` (forwards done, backwards not yet).
int peak_in_flight(const std::vector<StageOp>& ops);

}  // namespace actkit::pipeline
