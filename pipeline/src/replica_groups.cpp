#include "actkit/pipeline/replica_groups.h"

#include <c10/util/StringUtil.h>

#include <vector>

#include "actkit/core/errors.h"

namespace actkit::pipeline {

ReplicaGroups make_replica_groups(Communicator& world, int stages, int replicas) {
  if (stages < 1 || replicas < 1 || world.world_size() != stages * replicas) {
    throw InvalidInput(c10::str(stages, " stages × ", replicas, " replicas need ", stages * replicas,
                                " ranks, the group has ", world.world_size()));
  }
  ReplicaGroups g;
  g.replica = world.rank() / stages;
  g.stage = world.rank() % stages;
  g.pipeline = &world;
  if (replicas == 1) return g;
  // Every rank forms its replica's group first, then its stage's: the
  // members of each are forming it at the same time.
  std::vector<int> stages_of_replica, replicas_of_stage;
  for (int s = 0; s < stages; ++s) stages_of_replica.push_back(g.replica * stages + s);
  for (int r = 0; r < replicas; ++r) replicas_of_stage.push_back(r * stages + g.stage);
  g.own_pipeline = world.subgroup(c10::str("replica", g.replica), stages_of_replica);
  g.stage_replicas = world.subgroup(c10::str("stage", g.stage), replicas_of_stage);
  g.pipeline = g.own_pipeline.get();
  return g;
}

}  // namespace actkit::pipeline
