#include "pipeline_runner.h"

#include "aggregator/applier.h"
#include "aggregator/router.h"
#include "base/shutdown.h"

namespace tally::app {

PipelineRunner::PipelineRunner(PipelineOptions options, store::StateStore* store)
    : options_(std::move(options)), store_(store) {}

PipelineRunner::~PipelineRunner() { Stop(); }

void PipelineRunner::Start() {
  running_.store(true);
  if (options_.run_router) {
    threads_.emplace_back([this] {
      aggregator::RouterOptions ro;
      ro.kafka = options_.kafka;
      ro.input_topics = options_.input_topics;
      ro.group = options_.group;
      ro.deltas_partitions = options_.deltas_partitions;
      aggregator::Router router(ro);
      if (!router.Run(&stop_).ok()) {
        failed_.store(true);
        base::RequestShutdown();
      }
    });
  }
  if (options_.run_applier) {
    threads_.emplace_back([this] {
      aggregator::ApplierOptions ao;
      ao.kafka = options_.kafka;
      ao.group = options_.group;
      ao.flush_ms = options_.flush_ms;
      ao.key_budget = options_.key_budget;
      aggregator::Applier applier(ao, store_);
      if (!applier.Run(&stop_).ok()) {
        failed_.store(true);
        base::RequestShutdown();
      }
    });
  }
}

void PipelineRunner::Stop() {
  stop_.store(true);
  for (auto& t : threads_) t.join();
  threads_.clear();
  running_.store(false);
}

}  // namespace tally::app
