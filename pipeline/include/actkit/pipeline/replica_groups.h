// The groups of a pipeline run with data-parallel replicas: K stages × N
// replicas on K·N ranks, rank r running stage r mod K of replica r / K.
// Each replica's stages form a group (its boundaries: ranks 0..K-1 there
// are its stages), and so do each stage's replicas (the optimizer's
// exchange). With one replica the whole group is the pipeline.
#pragma once

#include <memory>

#include "actkit/comm/communicator.h"

namespace actkit::pipeline {

struct ReplicaGroups {
  int stage = 0, replica = 0;
  std::unique_ptr<Communicator> own_pipeline;    // this replica's stages (none with one replica)
  std::unique_ptr<Communicator> stage_replicas;  // this stage's replicas (none with one replica)
  Communicator* pipeline = nullptr;              // own_pipeline, or the whole group
};

// Forms the groups on every rank of `world` (every rank must call it).
// Throws InvalidInput when the group is not stages × replicas ranks,
// CommError when a group does not form within the timeout.
ReplicaGroups make_replica_groups(Communicator& world, int stages, int replicas);

}  // namespace actkit::pipeline
