// SealedWindowWriter: writes sealed applier windows on helper threads
// ("tally-commit") while the caller applies the next ones. The live applier
// and replay --from-input end their windows this way: memtable inserts are
// most of a window's cost, and each partition is its own RocksDB, so two
// helpers write two partitions at once. Internal to the aggregator.
//
// Thread model: externally synchronized (the applying thread); the write
// function runs on the helpers, one window at a time each.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "aggregator/window_applier.h"
#include "base/status.h"
#include "commit_helper.h"

namespace tally::aggregator {

class SealedWindowWriter {
 public:
  // `write` writes one sealed window (WindowApplier::CommitSealed, perhaps
  // with retries) and returns how that ended.
  using WriteFn = std::function<base::Status(int32_t partition, WindowApplier* window)>;

  explicit SealedWindowWriter(WriteFn write, int helpers = 2)
      : write_(std::move(write)), helper_(helpers) {}
  // Waits for the windows being written (without finishing them: call
  // Finish() first to keep what they wrote).
  ~SealedWindowWriter() {
    if (!writing_.empty()) helper_.Wait();
  }

  // True while windows are being written.
  bool Busy() { return !writing_.empty() && helper_.Busy(); }

  // Waits for the windows being written and FinishCommit()s each one that
  // was; their appliers may seal again. The first write error, if any.
  base::Status Finish() {
    if (writing_.empty()) return base::Status::Ok();
    helper_.Wait();
    base::Status first = base::Status::Ok();
    for (size_t i = 0; i < writing_.size(); i++) {
      if (results_[i].ok()) {
        writing_[i].second->FinishCommit();
      } else if (first.ok()) {
        first = results_[i];
      }
    }
    writing_.clear();
    return first;
  }

  // Seals `window` (which has applied deltas: window_dirty()) for the next
  // Start(). Only after Finish(), before Start().
  void Seal(int32_t partition, WindowApplier* window) {
    window->Seal();
    writing_.emplace_back(partition, window);
  }

  // Starts writing what was sealed; returns at once. Partitions are
  // independent (each batch carries its own offsets), so one that cannot be
  // written does not hold the others back.
  void Start() {
    if (writing_.empty()) return;
    results_.assign(writing_.size(), base::Status::Ok());
    helper_.Start(writing_.size(), [this](size_t i) {
      results_[i] = write_(writing_[i].first, writing_[i].second);
    });
  }

 private:
  WriteFn write_;
  CommitHelper helper_;
  std::vector<std::pair<int32_t, WindowApplier*>> writing_;
  std::vector<base::Status> results_;
};

}  // namespace tally::aggregator
