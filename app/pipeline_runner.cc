#include "pipeline_runner.h"

#include <pthread.h>

#include "aggregator/applier.h"
#include "aggregator/router.h"
#include "base/shutdown.h"

namespace tally::app {

PipelineRunner::PipelineRunner(PipelineOptions options, store::StateStore* store)
    : options_(std::move(options)), store_(store) {}

PipelineRunner::~PipelineRunner() { Stop(); }

// A stage that stops with an error stops the process unless the command
// handles it (on_failure): a restart resumes from the committed offsets and
// the state's marks. Named threads, so `top -H`
// and perf tell the stages apart.
void PipelineRunner::Spawn(const char* name, std::function<base::Status()> run_stage) {
  running_.store(true);
  threads_.emplace_back([this, name, run_stage = std::move(run_stage)] {
    pthread_setname_np(pthread_self(), name);
    if (!run_stage().ok()) {
      failed_.store(true);
      if (options_.on_failure) {
        options_.on_failure();
      } else {
        base::RequestShutdown();
      }
    }
  });
}

void PipelineRunner::Start() {
  stop_.store(false);
  failed_.store(false);
  if (options_.run_router) StartRouter();
  if (options_.run_applier) StartApplier(store_);
}

void PipelineRunner::StartRouter() {
  Spawn("tally-router", [this] {
    aggregator::RouterOptions ro;
    ro.kafka = options_.kafka;
    ro.input_topics = options_.input_topics;
    ro.group = options_.group;
    ro.deltas_partitions = options_.deltas_partitions;
    ro.whole_topics = options_.whole_topics;
    if (options_.cluster.enabled) {
      // A member that starts alone routes at once (RouterOptions::directory).
      ro.directory = options_.cluster.directory;
      ro.member = options_.cluster.member;
    }
    return aggregator::Router(ro).Run(&stop_);
  });
}

void PipelineRunner::StartApplier(store::StateStore* store) {
  store_ = store;
  Spawn("tally-applier", [this] {
    aggregator::ApplierOptions ao;
    ao.kafka = options_.kafka;
    ao.group = options_.group;
    ao.flush_ms = options_.flush_ms;
    ao.key_budget = options_.key_budget;
    ao.cluster = options_.cluster;
    ao.hot_posts = options_.hot_posts;
    return aggregator::Applier(ao, store_).Run(&stop_);
  });
}

void PipelineRunner::Stop() {
  stop_.store(true);
  for (auto& t : threads_) t.join();
  threads_.clear();
  running_.store(false);
}

}  // namespace tally::app
