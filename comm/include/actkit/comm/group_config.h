// Where a process group meets and who this process is in it, from the
// torchrun conventions: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
#pragma once

#include <chrono>
#include <string>

#include "actkit/comm/link_spec.h"

namespace actkit {

// The c10d process group that carries a group's messages and collectives.
enum class CommBackend {
  kGloo,  // CPU tensors over TCP; every LibTorch build that has c10d
  kNccl,  // CUDA tensors (messages staged through the rank's GPU); a LibTorch with CUDA
};

// "gloo" / "nccl".
const char* to_string(CommBackend backend);
// Parses "gloo" or "nccl"; throws InvalidInput naming the accepted values.
CommBackend parse_comm_backend(const std::string& text);
// Whether this build of ACTkit can form a group on `backend` (NCCL needs a
// LibTorch with CUDA and c10d's NCCL group).
bool comm_backend_available(CommBackend backend);

// Throws InvalidInput for --link kernel with NCCL: tc shapes TCP between
// network namespaces, and NCCL's GPU transports bypass it.
void check_link_backend(LinkMode mode, CommBackend backend);

struct GroupConfig {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // How long any wait on another rank may take (joining the group, a
  // message, the handshake, a barrier) before it fails naming that rank.
  // 300 s: longer than any training step the CLI runs, short enough that a
  // dead machine does not hold the others for long.
  std::chrono::milliseconds timeout{300000};
  CommBackend backend = CommBackend::kGloo;
  // When set, the ranks (all on this machine) meet through a file store at
  // this path instead of a TCP store on master_addr:master_port: no
  // listening socket for the rendezvous at all. The launcher sets it inside
  // its private TMPDIR.
  std::string store_file;

  // Throws InvalidInput naming the field that is out of range.
  void validate() const;

  // Reads RANK, WORLD_SIZE, MASTER_ADDR (default 127.0.0.1), MASTER_PORT
  // (default 29500), ACTKIT_COMM_TIMEOUT (seconds, default 300) and
  // ACTKIT_COMM_BACKEND (gloo or nccl, default gloo); with
  // ACTKIT_LOCAL_STORE=1, store_file is $TMPDIR/actkit-store (the
  // launcher's private folder: files::temp_directory). Throws InvalidInput
  // if RANK or WORLD_SIZE is missing or any of them is malformed.
  static GroupConfig from_env();
  // Whether RANK and WORLD_SIZE are both set (the process was launched as
  // one rank of a group).
  static bool in_env();
};

// ACTKIT_COMM_TIMEOUT (whole seconds, > 0) when set, else 300 s: the one
// reading of it, for GroupConfig::from_env and the launchers. Throws
// InvalidInput for a malformed or non-positive value.
std::chrono::seconds comm_timeout_from_env();

// A TCP port on 127.0.0.1 that nothing listens on right now (the kernel
// picks it), for a launcher that starts every rank on this machine; 29500
// when none can be had. Another program may take it before the group does.
int free_local_port();

}  // namespace actkit
