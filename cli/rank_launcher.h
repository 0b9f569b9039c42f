// Starting the ranks of a multi-process command (`actkit pipeline`,
// `actkit dp`) on this machine: this program again, once per rank, with
// RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set; either on loopback
// (links paced in-process) or each rank in a network namespace of its own
// with its egress shaped by tc (--link kernel).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "actkit/comm/group_config.h"

namespace actkit::cli {

struct RankLaunch {
  std::string command;            // "pipeline", for messages
  std::vector<std::string> args;  // what each rank runs: actkit ARGS...
  int ranks = 1;
  int port = 0;                   // 0: a free one (loopback), 29500 (namespaces)
  int timeout_s = 300;            // how long a rank may wait on another
};

// The flags every multi-process command takes, declared once.
struct RankFlags {
  int port = 0;       // --port: the rendezvous (0: a free one)
  int timeout_s = 0;  // --timeout: how long a rank waits for another (0: ACTKIT_COMM_TIMEOUT, else 300)
  CommBackend backend = CommBackend::kGloo;  // --backend gloo|nccl
  int max_ranks = 0;  // --max-ranks: the most ranks a launch starts (0: default_rank_ceiling())
};

// The most ranks a launch starts on this machine unless --max-ranks says
// more: 4 per core (a rank spends much of a step waiting on its links and
// peers), and at least 16, so that a 2-core machine still runs 2 stages × 4
// replicas. What --max-ranks may allow is at most kMaxRanks.
int default_rank_ceiling();
constexpr int kMaxRanks = 4096;

// Declares --port, --timeout, --backend and --max-ranks on `command`,
// range-checked when the command line is parsed: an unknown backend, or
// nccl in a build without it, is refused before any rank starts.
void add_rank_flags(CLI::App* command, RankFlags* flags);

// How long a rank waits for another: --timeout when given, else
// ACTKIT_COMM_TIMEOUT, else 300 s.
int rank_timeout_seconds(const RankFlags& flags);

// This process's place in the group (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT from the environment), with the flags' timeout and backend.
GroupConfig rank_group(const RankFlags& flags);

// The launch of `ranks` ranks of `command` with this command line and
// flags. Throws InvalidInput, before anything starts, for more ranks than
// --max-ranks (or default_rank_ceiling()) allows, naming `counted_by` (the
// flags that asked for them) and both figures.
RankLaunch rank_launch(const std::string& command, int64_t ranks, const std::string& counted_by,
                       const RankFlags& flags);

// The callback of a multi-process command: `finish` (the flags into the
// run's config, so a typo fails before any rank starts), then `run_rank`
// in a process started as a rank (RANK and WORLD_SIZE set), else `launch`.
void set_rank_callback(CLI::App* command, std::function<void()> finish, std::function<void()> run_rank,
                       std::function<void()> launch);

// Runs every rank on loopback and waits. Throws Error naming the rank whose
// error was raised first (first_failure) with its message, or one
// that was killed.
void launch_local(const RankLaunch& launch);

// --link kernel: runs this program again under `unshare -n -m` (root), in
// a network and mount namespace of its own. There every rank gets a
// network namespace with one veth on a shared bridge (10.77.0.<rank + 1>,
// MTU 1500) and an htb qdisc on its egress: `peer_rate(r, p)` bit/s for
// what rank r sends to p (0: not shaped by peer), and `egress_rate(r)` for
// everything else (0: unshaped). Everything lives in the private
// namespaces and goes when they end; the host's network is never touched.
// Throws Error when the tools are missing, the setup fails, or a rank fails.
void launch_shaped(const RankLaunch& launch, const std::function<double(int, int)>& peer_rate,
                   const std::function<double(int)>& egress_rate);

}  // namespace actkit::cli
