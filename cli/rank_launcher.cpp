// The rank launcher (see the header).
#include "rank_launcher.h"

#include <c10/util/StringUtil.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <thread>

#include "actkit/process/process.h"
#include "actkit/comm/group_config.h"
#include "actkit/core/errors.h"
#include "cli_util.h"

namespace actkit::cli {
namespace {

// The launcher quotes the first failed rank's message up to this length.
constexpr size_t kMaxQuotedMessage = 400;

std::string rank_namespace(int r) { return "actkit-r" + std::to_string(r); }
std::string rank_address(int r) { return "10.77.0." + std::to_string(r + 1); }
std::string rank_interface(int r) { return "v" + std::to_string(r) + "r"; }
std::string kbit(double bps) { return std::to_string(std::max<int64_t>(8, int64_t(bps / 1000))) + "kbit"; }

// The ranks share this machine's cores.
std::string threads_per_rank(int ranks) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::to_string(std::max(1u, cores / unsigned(ranks)));
}

// Names the rank whose error came first (first_failure: the others
// may have failed because of it, or been stopped by the launcher), with
// its message when it noted one.
void check_results(const RankLaunch& l, const std::vector<ProcessResult>& results) {
  const int first = first_failure(results);
  if (first < 0) return;
  int failed = 0;
  for (const auto& r : results) failed += r.succeeded() ? 0 : 1;
  const ProcessResult& f = results[size_t(first)];
  const std::string others = failed > 1 ? c10::str("; ", failed - 1, " other rank(s) failed after it") : "";
  if (!f.error.empty()) {
    std::string message = f.error;
    if (message.size() > kMaxQuotedMessage) message = message.substr(0, kMaxQuotedMessage) + "...";
    throw Error(c10::str(l.command, ": rank ", first, " failed first: ", message, others));
  }
  throw Error(f.signal != 0 ? c10::str(l.command, ": rank ", first, " was killed by signal ", f.signal, others)
                            : c10::str(l.command, ": rank ", first, " failed first (exit status ", f.exit_status,
                                       "; its error is above", others, ")"));
}

// After one rank fails, how long the others get to end on their own: a
// peer of a rank that died notices within a second; one still waiting at
// the rendezvous would wait its whole timeout, so it is stopped.
std::chrono::seconds failure_grace(const RankLaunch& l) { return std::chrono::seconds(std::min(l.timeout_s + 5, 10)); }

// Runs the ranks, each with a private TMPDIR and a note for its error, and
// names the rank that failed first.
void run_ranks(const RankLaunch& l, const std::vector<ProcessSpec>& ranks) {
  check_results(l, run_processes(ranks, failure_grace(l), /*private_tmpdir=*/true));
}

}  // namespace

void add_rank_flags(CLI::App* command, RankFlags* flags) {
  command->add_option("--port", flags->port,
                      "Port of the rendezvous store of a --link kernel run (default 29500; ranks the launcher starts "
                      "on this machine meet through a private file, not a port)")
      ->check(CLI::Range(0, 65535));
  command->add_option("--timeout", flags->timeout_s,
                      "Seconds any rank waits for another before failing (default: ACTKIT_COMM_TIMEOUT, else 300)")
      ->check(kNonNegativeNumber);
  CommBackend* backend = &flags->backend;
  command
      ->add_option_function<std::string>(
          "--backend", [backend](const std::string& name) { *backend = parse_comm_backend(name); },
          "c10d group the ranks talk through: gloo (CPU) or nccl (each rank's GPU: LOCAL_RANK, else rank modulo the "
          "GPUs; needs a LibTorch with CUDA)")
      ->check(CLI::IsMember({"gloo", "nccl"}))
      ->check(CLI::Validator(
          [](std::string& name) -> std::string {
            return comm_backend_available(parse_comm_backend(name))
                       ? ""
                       : "nccl: this ACTkit was built against a LibTorch without CUDA or c10d's NCCL group";
          },
          "", "built in"))
      ->default_str("gloo");
  command->add_option("--max-ranks", flags->max_ranks,
                      c10::str("The most ranks this launch may start (default: 4 per core, at least 16; here ",
                               default_rank_ceiling(), ")"))
      ->check(CLI::Range(1, kMaxRanks));
}

int default_rank_ceiling() {
  return std::max(16, 4 * int(std::max(1u, std::thread::hardware_concurrency())));
}

void set_rank_callback(CLI::App* command, std::function<void()> finish, std::function<void()> run_rank,
                       std::function<void()> launch) {
  command->callback([finish, run_rank, launch] {
    finish();
    if (GroupConfig::in_env()) {
      run_rank();
    } else {
      launch();
    }
  });
}

int rank_timeout_seconds(const RankFlags& flags) {
  if (flags.timeout_s > 0) return flags.timeout_s;
  return int(comm_timeout_from_env().count());
}

GroupConfig rank_group(const RankFlags& flags) {
  GroupConfig g = GroupConfig::from_env();
  if (flags.timeout_s > 0) g.timeout = std::chrono::seconds(flags.timeout_s);
  g.backend = flags.backend;
  return g;
}

RankLaunch rank_launch(const std::string& command, int64_t ranks, const std::string& counted_by,
                       const RankFlags& flags) {
  const int ceiling = flags.max_ranks > 0 ? flags.max_ranks : default_rank_ceiling();
  if (ranks > ceiling) {
    const std::string more = ranks <= kMaxRanks ? c10::str("; --max-ranks ", ranks, " starts them anyway")
                                                : c10::str("; no launch starts more than ", kMaxRanks);
    throw InvalidInput(c10::str(command, ": ", counted_by, ": ", ranks, " ranks, more than the ", ceiling,
                                " this launch starts",
                                flags.max_ranks > 0 ? " (--max-ranks)" : " on this machine (4 per core, at least 16)",
                                more));
  }
  if (ranks < 1) throw InvalidInput(c10::str(command, ": ", counted_by, ": ", ranks, " ranks"));
  return {command, command_line(), int(ranks), flags.port, rank_timeout_seconds(flags)};
}

void launch_local(const RankLaunch& l) {
  const int port = l.port > 0 ? l.port : free_local_port();
  const std::string threads = threads_per_rank(l.ranks);
  std::vector<ProcessSpec> ranks;
  for (int r = 0; r < l.ranks; ++r) {
    std::vector<std::string> argv{self_executable()};
    argv.insert(argv.end(), l.args.begin(), l.args.end());
    ranks.push_back({argv,
                     {{"RANK", std::to_string(r)},
                      {"LOCAL_RANK", std::to_string(r)},  // every rank on this machine: its GPU for NCCL
                      {"WORLD_SIZE", std::to_string(l.ranks)},
                      {"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", std::to_string(port)},
                      // No socket for the rendezvous: a file in the private TMPDIR.
                      {"ACTKIT_LOCAL_STORE", "1"},
                      {"OMP_NUM_THREADS", threads}}});
  }
  run_ranks(l, ranks);
}

void launch_shaped(const RankLaunch& l, const std::function<double(int, int)>& peer_rate,
                   const std::function<double(int)>& egress_rate) {
  if (std::getenv("ACTKIT_NETNS") == nullptr) {
    if (!program_in_path("unshare") || !program_in_path("tc") || !program_in_path("ip")) {
      throw Error(l.command + ": --link kernel needs unshare, ip and tc (util-linux, iproute2); use --link process");
    }
    // unshare and env exec: the launcher inside is this process's child, and ends with it.
    std::vector<std::string> argv{"unshare", "-n", "-m", "--propagation", "private", "env", "ACTKIT_NETNS=1",
                                  "ACTKIT_PARENT_PID=" + std::to_string(::getpid()), self_executable()};
    argv.insert(argv.end(), l.args.begin(), l.args.end());
    if (!run_process(argv).succeeded()) {
      throw Error(l.command + ": the shaped run failed (see above; unshare -n -m needs root)");
    }
    return;
  }
  const int k = l.ranks;
  std::vector<std::vector<std::string>> setup{
      // The namespaces' names go to a tmpfs of this mount namespace, not the host's /run/netns.
      {"mkdir", "-p", "/run/netns"},
      {"mount", "-t", "tmpfs", "actkit-netns", "/run/netns"},
      {"ip", "link", "set", "lo", "up"},
      {"ip", "link", "add", "actkit-br", "type", "bridge"},
      {"ip", "link", "set", "actkit-br", "up"}};
  for (int r = 0; r < k; ++r) {
    const std::string ns = rank_namespace(r), dev = rank_interface(r), host = "v" + std::to_string(r) + "h";
    setup.push_back({"ip", "netns", "add", ns});
    setup.push_back({"ip", "link", "add", host, "type", "veth", "peer", "name", dev});
    setup.push_back({"ip", "link", "set", dev, "netns", ns});
    setup.push_back({"ip", "link", "set", host, "master", "actkit-br", "up"});
    setup.push_back({"ip", "-n", ns, "addr", "add", rank_address(r) + "/24", "dev", dev});
    setup.push_back({"ip", "-n", ns, "link", "set", dev, "mtu", "1500", "up"});
    setup.push_back({"ip", "-n", ns, "link", "set", "lo", "up"});
    // htb: a default class (the whole interface's rate) and a class per
    // shaped peer, each with a 32 KB bucket (as the tbf of a single link).
    const double egress = egress_rate(r);
    setup.push_back({"tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "99"});
    if (egress > 0) {
      setup.push_back({"tc", "-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:99", "htb", "rate",
                       kbit(egress), "burst", "32kb"});
    } else {
      setup.push_back({"tc", "-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:99", "htb", "rate",
                       "10gbit"});
    }
    for (int peer = 0; peer < k; ++peer) {
      if (peer == r) continue;
      const double rate = peer_rate(r, peer);
      if (rate <= 0) continue;
      const std::string cls = "1:" + std::to_string(10 + peer);
      setup.push_back({"tc", "-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", cls, "htb", "rate",
                       kbit(rate), "burst", "32kb"});
      setup.push_back({"tc", "-n", ns, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1",
                       "u32", "match", "ip", "dst", rank_address(peer) + "/32", "flowid", cls});
    }
  }
  for (const auto& cmd : setup) {
    if (!run_process(cmd, ChildOutput::kDiscard).succeeded()) {
      std::string line;
      for (const auto& w : cmd) line += w + " ";
      throw Error(l.command + ": cannot set up the emulated network: `" + line + "` failed");
    }
  }
  const std::string threads = threads_per_rank(k);
  std::vector<ProcessSpec> ranks;
  for (int r = 0; r < k; ++r) {
    std::vector<std::string> argv{"ip", "netns", "exec", rank_namespace(r), self_executable()};
    argv.insert(argv.end(), l.args.begin(), l.args.end());
    ranks.push_back({argv,
                     {{"RANK", std::to_string(r)},
                      {"WORLD_SIZE", std::to_string(k)},
                      {"MASTER_ADDR", rank_address(0)},
                      {"MASTER_PORT", std::to_string(l.port > 0 ? l.port : 29500)},
                      {"GLOO_SOCKET_IFNAME", rank_interface(r)},
                      {"OMP_NUM_THREADS", threads}}});
  }
  run_ranks(l, ranks);
}

}  // namespace actkit::cli
