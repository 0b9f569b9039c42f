// The c10d process group under a Communicator, made in one translation unit
// per backend so that no other file of ACTkit includes a backend's headers.
//
// Why one file each: LibTorch's wheels ship c10d's ProcessGroupGloo.hpp but
// not the Gloo headers it includes, so ACTkit compiles that one file
// against Debian's Gloo headers (another Gloo revision than the one inside
// the wheel). That is ABI-safe only because the file touches nothing whose
// layout comes from Gloo: it builds ProcessGroupGloo::Options (a vector of
// shared_ptr<gloo::transport::Device> and an int), calls the out-of-line
// constructor and device factories, and hands back the group as its c10d
// base class. It is compiled with hidden visibility, so no inline Gloo code
// it instantiates can interpose on LibTorch's own copy (docs/architecture.md).
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>

#include "actkit/comm/group_config.h"

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace actkit::detail {

// What every backend's group is in c10d: from LibTorch 2.0 on a Backend,
// before that a ProcessGroup; both have the same send/recv/collectives.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveGroup = c10d::Backend;
#else
using CollectiveGroup = c10d::ProcessGroup;
#endif

// A formed group and the device its tensors must live on.
struct BackendGroup {
  c10::intrusive_ptr<CollectiveGroup> group;
  c10::Device device{c10::kCPU};
};

// Gloo over `store` for rank `rank` of `size`: binds to GLOO_SOCKET_IFNAME
// when set, to 127.0.0.1 when `config.master_addr` is loopback (a run on one
// machine listens nowhere else), else to this host's address. Blocks until
// every rank joined (within config.timeout); throws what c10d throws.
BackendGroup make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             const GroupConfig& config);

// NCCL over `store`; the rank's GPU is LOCAL_RANK when set, else rank modulo
// the GPUs visible. Only in builds with ACTKIT_WITH_NCCL; throws
// InvalidInput elsewhere or when no GPU is visible.
BackendGroup make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             const GroupConfig& config);

}  // namespace actkit::detail
