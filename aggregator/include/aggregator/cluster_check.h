// Attaching a state directory to a Kafka cluster (SPEC section 2).
//
// The state records the identity of the cluster whose logs it was built
// from. Started against another cluster: for the embedded broker (whose log
// lives in memory and is new after every restart) tally keeps the counts and
// reads the new log from its start; for any other cluster it refuses unless
// told to reset its offsets.
#pragma once

#include <string>

#include "base/kafka.h"
#include "base/status.h"
#include "store/state_store.h"

namespace tally::aggregator {

// Compares `cluster` with what `store` recorded and acts as above. OK when
// the pipeline may start; FailedPrecondition (with the one-line explanation)
// when it must not. Logs one line whenever the identity changes.
base::Status AttachToCluster(store::StateStore* store, const base::ClusterIdentity& cluster,
                             bool reset_offsets);

// True when AttachToCluster(state in `dir`, `cluster`, `reset_offsets`)
// cannot refuse, read without opening the state: the cluster is embedded,
// offsets are reset, the state records `cluster` already, or there is no
// state yet (`dir` missing or empty). False when it might refuse, or `dir`
// cannot be read. Lets a caller start work that needs no state (routing)
// while the state opens.
bool AttachCannotRefuse(const std::string& dir, const base::ClusterIdentity& cluster,
                        bool reset_offsets);

}  // namespace tally::aggregator
