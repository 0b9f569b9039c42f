// A process group and the messages ranks send each other through it. The
// group is c10d's (a TCPStore at MASTER_ADDR:MASTER_PORT; Gloo for the byte
// messages, and for the collectives Gloo on the CPU or, with
// GroupConfig::backend kNccl, NCCL on the rank's GPU); this class adds what training over slow links needs on top of c10d's
// send/recv: byte messages of any size (the size first, then the bytes),
// sends that return at once and leave from a thread of their own, receives
// fetched ahead of need, an emulated link per directed pair of ranks, a
// timeout on every wait that names the rank waited on, and a startup
// handshake that checks every rank runs the same configuration.
//
// Channels: small integers (0..kMaxChannels-1) that keep different streams
// between the same two ranks apart (activations, gradients, ...). Messages
// from one rank to another on one channel arrive in the order sent.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actkit/comm/comm_error.h"
#include "actkit/comm/group_config.h"
#include "actkit/comm/link_spec.h"

namespace actkit {

// What crossed one directed link on one channel, seen from this rank.
struct ChannelStats {
  int64_t messages = 0;
  int64_t bytes = 0;          // payload bytes plus the 8-byte size of each
  double wait_seconds = 0;    // time a caller spent blocked on this channel
};

// The collectives this rank has run: calls, the bytes they put on this
// rank's wire (the ring algorithms' volume, below) and the time they took.
struct CollectiveStats {
  int64_t calls = 0;
  int64_t wire_bytes = 0;
  double seconds = 0;
};

class Communicator {
 public:
  static constexpr int kMaxChannels = 16;
  // Every message carries its size ahead of it (ChannelStats::bytes counts it).
  static constexpr int64_t kMessageHeaderBytes = 8;
  // Largest message accepted from a peer (a size above it is a corrupt
  // stream, not a request to allocate): 16 GiB.
  static constexpr int64_t kMaxMessageBytes = int64_t(1) << 34;

  // Joins the group; returns when every rank has joined. Throws
  // InvalidInput for a bad config or a backend this build lacks, CommError
  // when the group does not form within config.timeout.
  explicit Communicator(const GroupConfig& config);
  // Waits for this rank's queued sends (up to the timeout), then leaves.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int world_size() const;
  const GroupConfig& config() const;

  // A group of some of this group's ranks: `members` (ascending, this
  // rank among them), numbered 0, 1, ... in that order in the new group.
  // It meets through this group's store under `name`, so it needs no port
  // of its own; it has its own channels, links, collectives and handshakes.
  // Every member calls it with the same name and members, no other rank
  // does, and no two live groups share a name. Its errors name ranks by
  // the outermost group's numbers. It must not outlive this communicator.
  // Throws InvalidInput for bad members or name, CommError when the group
  // does not form within the timeout.
  std::unique_ptr<Communicator> subgroup(const std::string& name, const std::vector<int>& members);

  // Emulates `spec` on every message this rank sends to `peer` from now
  // on (all channels share the link). Call before sending.
  void set_link(int peer, LinkSpec spec);

  // Queues `bytes` for `peer` on `channel` and returns; a thread sends it
  // when its link allows. Throws CommError if an earlier send to that peer
  // failed, InvalidInput for a bad peer or channel.
  void send(int peer, int channel, std::vector<uint8_t> bytes);
  // Waits until every queued send has reached its peer. Throws CommError
  // naming the peer of the first failed send or one still pending at the
  // timeout.
  void flush();

  // Announces that `count` more messages of at most `max_bytes` each will
  // come from `peer` on `channel`; a thread starts receiving them at once so
  // the transfer overlaps whatever this rank does until it calls recv(). A
  // peer announcing a larger message breaks the stream (recv throws
  // CommError) before anything is allocated for it. Throws InvalidInput for
  // a bad peer, channel, count or limit.
  void expect(int peer, int channel, int count = 1, int64_t max_bytes = kMaxMessageBytes);
  // The next message from `peer` on `channel` (expect() must have
  // announced it). `what` says what it is, for errors ("activations of
  // micro-batch 3 in step 7"). Throws CommError naming the peer and `what`
  // if the peer died, closed, sent a malformed size, or nothing came within
  // the timeout.
  std::vector<uint8_t> recv(int peer, int channel, const std::string& what);

  // Checks that every rank passed the same facts (name, value pairs in the
  // same order: model, stage split, codec, bits, ...). Throws CommError on
  // every rank, naming the first differing fact, a rank that differs and
  // both values; CommError if a rank does not arrive within the timeout.
  void handshake(const std::vector<std::pair<std::string, std::string>>& facts);

  // Returns when every rank has called it. Throws CommError at the timeout.
  void barrier();

  // Collectives over the whole group: every rank calls the same ones, with
  // the same sizes, in the same order. `what` names the call for errors
  // ("1-bit allgather of step 12"). A rank that died or did not arrive
  // within the timeout makes the others throw CommError naming it (each
  // rank records how many collectives it has entered in the store, so the
  // one lagging behind is known); the store going away names rank 0.
  //
  // Pacing: set_egress(spec) emulates this rank's network interface for
  // them. A call that puts E bytes on this rank's wire in H sequential hops
  // returns no sooner than E·8/rate + H·latency after it began (or when the
  // real transfer ends, if later). E and H are the ring algorithms':
  //   all_reduce_sum  E = 2(N−1)/N·size, H = 2(N−1)
  //   all_to_all      E = (N−1)/N·size,  H = 1
  //   all_gather      E = (N−1)·size,    H = N−1
  void set_egress(LinkSpec spec);
  // Sums `t` (CPU, contiguous, fp64, fp32 or fp16) over every rank, in place.
  // Throws InvalidInput for another tensor, CommError as above.
  void all_reduce_sum(at::Tensor& t, const std::string& what);
  // `in` holds N equal blocks (CPU, contiguous, uint8); block i goes to rank
  // i, and block j of `out` (same size) comes from rank j.
  void all_to_all(const at::Tensor& in, at::Tensor& out, const std::string& what);
  // `out` (N times `in`'s size, uint8) gets every rank's `in`, rank order.
  void all_gather(const at::Tensor& in, at::Tensor& out, const std::string& what);
  CollectiveStats collective_stats() const;

  // Traffic sent to / received from `peer` on `channel` so far.
  ChannelStats sent_stats(int peer, int channel) const;
  ChannelStats received_stats(int peer, int channel) const;

 private:
  struct Impl;
  Communicator();  // for subgroup()
  std::unique_ptr<Impl> impl_;
};

}  // namespace actkit
