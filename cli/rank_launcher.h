// Starting the ranks of a multi-process command (`actkit pipeline`,
// `actkit dp`) on this machine: this program again, once per rank, with
// RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set; either on loopback
// (links paced in-process) or each rank in a network namespace of its own
// with its egress shaped by tc (--link kernel).
#pragma once

#include <CLI/CLI.hpp>

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

// --backend gloo|nccl: the c10d group under the ranks' messages. Checked
// when the command line is parsed: an unknown name, or nccl in a build
// without it, is refused before any rank starts.
void add_backend_option(CLI::App* command, CommBackend* backend);

// How long a rank waits for another: `flag` (--timeout) when positive,
// else ACTKIT_COMM_TIMEOUT, else 300 s.
int rank_timeout_seconds(int flag);

// Runs every rank on loopback and waits. Throws Error naming a rank that
// failed or was killed.
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
