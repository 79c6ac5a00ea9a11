// PipelineRunner: the router and/or applier threads of one process, started
// and stopped together (tally up, tally aggregate). Wiring only.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "aggregator/applier.h"
#include "aggregator/defaults.h"
#include "base/kafka.h"
#include "store/state_store.h"

namespace tally::app {

struct PipelineOptions {
  base::KafkaOptions kafka;
  std::vector<std::string> input_topics;
  std::string group = std::string(base::kDefaultGroup);
  uint32_t deltas_partitions = 0;
  bool run_router = true;
  bool run_applier = true;
  bool whole_topics = false;  // the router takes every input partition (RouterOptions::whole_topics)
  int flush_ms = aggregator::kDefaultFlushMs;
  size_t key_budget = aggregator::kDefaultKeyBudget;
  // A member of a cluster (SPEC section 6): the applier joins the group;
  // the router starts standalone when the directory shows no other member.
  aggregator::ApplierClusterOptions cluster;
  // Optional; must outlive the runner: the applier tallies each window's
  // post increments there (ApplierOptions::hot_posts).
  base::HotKeys* hot_posts = nullptr;
  // Called on the stage's thread when a stage stops with an error; null:
  // request a process shutdown (base/shutdown.h).
  std::function<void()> on_failure;
};

class PipelineRunner {
 public:
  // `store` (needed by the applier) must outlive the runner.
  PipelineRunner(PipelineOptions options, store::StateStore* store);
  ~PipelineRunner();  // Stop()s

  // Starts the threads (again, after Stop(): with new Kafka clients). A
  // thread that fails calls options.on_failure.
  void Start();
  // Start() in two steps, for a caller that starts routing before the state
  // is open (the router needs none): StartRouter() once, then
  // StartApplier(store) once (`store` replaces the constructor's; it must
  // outlive the runner).
  void StartRouter();
  void StartApplier(store::StateStore* store);
  // Stops and joins (the last window is applied). Idempotent. failed()
  // stays as it was until the next Start().
  void Stop();
  // True if a stage stopped with an error.
  bool failed() const { return failed_.load(); }
  // True while every stage started is running (for /healthz).
  bool running() const { return running_.load() && !failed_.load(); }

 private:
  PipelineOptions options_;
  store::StateStore* store_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::atomic<bool> running_{false};
  std::vector<std::thread> threads_;

  void Spawn(const char* name, std::function<base::Status()> run_stage);
};

}  // namespace tally::app
