// Attaching a state directory to a Kafka cluster (SPEC section 2).
//
// The state records the identity of the cluster whose logs it was built
// from. Started against another cluster, what happens is the caller's
// OnNewCluster: for tally up's own broker (its log lives in the state
// directory, so a new log means the log was removed or the state copied
// without it) and with --reset-offsets tally keeps the counts and reads the
// new logs from their start; for a cluster the user named it refuses.
#pragma once

#include <string>

#include "base/kafka.h"
#include "base/status.h"
#include "store/state_store.h"

namespace tally::aggregator {

// What AttachToCluster does with state built from another cluster.
enum class OnNewCluster {
  kRefuse,        // --brokers: refuse, naming --reset-offsets
  kResetOffsets,  // --reset-offsets: keep the counts, read the logs from their start
  kOwnBroker,     // tally up's own broker: the same, said as a new log of that broker
};

// Compares `cluster` with what `store` recorded and acts as above. OK when
// the pipeline may start; FailedPrecondition (with the one-line explanation)
// when it must not. Logs one line whenever the identity changes.
base::Status AttachToCluster(store::StateStore* store, const base::ClusterIdentity& cluster,
                             OnNewCluster on_new);

// True when AttachToCluster(state in `dir`, `cluster`, `on_new`) cannot
// refuse, read without opening the state: `on_new` is not kRefuse, the
// cluster is librdkafka's mock (tests), the state records `cluster` already, or there is no
// state yet (`dir` missing or empty). False when it might refuse, or `dir`
// cannot be read. Lets a caller start work that needs no state (routing)
// while the state opens.
bool AttachCannotRefuse(const std::string& dir, const base::ClusterIdentity& cluster,
                        OnNewCluster on_new);

}  // namespace tally::aggregator
