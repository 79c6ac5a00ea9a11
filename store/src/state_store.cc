// StateStore beyond opening and reading: following a writer (CatchUp and
// the thread that calls it: its commits, and which partitions it holds),
// compaction, the progress of every partition, why the store does not
// write.
#include "store/state_store.h"

#include <fmt/core.h>
#include <pthread.h>
#include <rocksdb/db.h>
#include <rocksdb/perf_level.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "base/clock.h"
#include "base/log.h"
#include "keys.h"
#include "state_store_impl.h"

namespace tally::store {

namespace fs = std::filesystem;
using base::Result;
using base::Status;

Status FromRocks(const rocksdb::Status& s, std::string_view context) {
  if (s.ok()) return Status::Ok();
  std::string msg = fmt::format("{}: {}", context, s.ToString());
  if (s.IsNotFound()) return Status::NotFound(std::move(msg));
  if (s.IsCorruption()) return Status::Corruption(std::move(msg));
  if (s.IsIOError()) return Status::IOError(std::move(msg));
  if (s.IsInvalidArgument() || s.IsNotSupported()) return Status::InvalidArgument(std::move(msg));
  if (s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) return Status::Unavailable(std::move(msg));
  if (s.IsAborted() || s.IsShutdownInProgress()) return Status::Aborted(std::move(msg));
  return Status::Internal(std::move(msg));
}

std::string PartitionDirName(uint32_t i) { return fmt::format("partition-{:03d}", i); }

std::string ReadCurrentFile(const std::string& db_path) {
  std::ifstream f(db_path + "/CURRENT");
  std::string name;
  if (f) std::getline(f, name);
  return name;
}

void DisablePerfCounters() { rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable); }

StateStore::StateStore(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}

StateStore::~StateStore() {
  if (rep_->follower.joinable()) {
    {
      std::lock_guard<std::mutex> l(rep_->follow_mu);
      rep_->stopping = true;
    }
    rep_->follow_cv.notify_all();
    rep_->follower.join();
  }
  rep_->partitions.clear();  // closes every DB before the secondary scratch dir goes
  if (!rep_->secondary_dir.empty()) {
    std::error_code ec;
    fs::remove_all(rep_->secondary_dir, ec);
  }
}

uint32_t StateStore::partitions() const { return static_cast<uint32_t>(rep_->partitions.size()); }
const std::string& StateStore::dir() const { return rep_->options.dir; }
const StoreOptions& StateStore::options() const { return rep_->options; }
Partition* StateStore::partition(uint32_t i) { return rep_->partitions[i].get(); }
std::string StateStore::recorded_cluster() const { return rep_->cluster; }

Status StateStore::CompactAll() {
  if (rep_->options.read_only) return Status::FailedPrecondition("store is read-only");
  for (const auto& p : rep_->partitions) {
    std::shared_ptr<rocksdb::DB> db = p->rep_->db.load();
    if (db == nullptr) continue;  // not held
    const std::string what = fmt::format("partition {}: compacting", p->id());
    TALLY_RETURN_IF_ERROR(FromRocks(db->Flush(rocksdb::FlushOptions()), what));
    auto table_files = [&db] {
      std::vector<rocksdb::LiveFileMetaData> files;
      db->GetLiveFilesMetaData(&files);
      std::vector<uint64_t> numbers;
      for (const auto& f : files) numbers.push_back(f.file_number);
      std::sort(numbers.begin(), numbers.end());
      return numbers;
    };
    const std::vector<uint64_t> before = table_files();
    // The flush above (or one of the manual compaction's own) lets RocksDB
    // schedule an automatic compaction, which may move an L0 file that
    // overlaps no other to the last level as it is (a trivial move) before
    // the manual compaction lists its inputs; that file keeps its merge
    // operands and the upper levels' compression. A second pass compacts the
    // last level into itself, such files included.
    for (int pass = 0; pass < 2; pass++) {
      rocksdb::CompactRangeOptions o;
      o.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
      TALLY_RETURN_IF_ERROR(FromRocks(db->CompactRange(o, nullptr, nullptr), what));
      const std::vector<uint64_t> after = table_files();
      std::vector<uint64_t> kept;
      std::set_intersection(before.begin(), before.end(), after.begin(), after.end(),
                            std::back_inserter(kept));
      if (kept.empty()) break;
    }
  }
  return Status::Ok();
}

Result<std::vector<Progress>> StateStore::LoadAllProgress() const {
  std::vector<Progress> out;
  out.reserve(partitions());
  std::vector<uint32_t> not_held;
  for (const auto& p : rep_->partitions) {
    auto pr = p->LoadProgress();
    if (IsNotHeld(pr.status())) {
      not_held.push_back(p->id());
      continue;
    }
    if (!pr.ok()) return pr.status();
    out.push_back(std::move(pr).value());
  }
  if (!not_held.empty()) return NotHeldError(not_held);
  return out;
}

Result<std::map<uint32_t, Progress>> StateStore::LoadHeldProgress() const {
  std::map<uint32_t, Progress> out;
  for (const auto& p : rep_->partitions) {
    auto pr = p->LoadProgress();
    if (IsNotHeld(pr.status())) continue;
    if (!pr.ok()) return pr.status();
    out.emplace(p->id(), std::move(pr).value());
  }
  return out;
}

std::string StateStore::WriteProblem() const {
  if (rep_->reserve == nullptr) return {};
  if (Status full = rep_->reserve->Check(); !full.ok()) return full.message();
  for (const auto& p : rep_->partitions) {
    if (std::string problem = p->WriteProblem(); !problem.empty()) return problem;
  }
  return {};
}

Status StateStore::CatchUp() {
  if (!rep_->options.read_only) return Status::Ok();
  std::lock_guard<std::mutex> l(rep_->catch_up_mu);
  const uint32_t n = partitions();
  // What the writer holds: HELD, or every partition without the file. If
  // HELD cannot be read, the partitions held here stay as they are.
  auto writer = ReadHeldFile(rep_->options.dir, n);
  Status first = writer.status();
  for (uint32_t p = 0; p < n; p++) {
    if (!rep_->wanted[p]) continue;
    Partition::Rep& r = *rep_->partitions[p]->rep_;
    const bool held = r.held.load();
    bool writer_holds = held;
    if (writer.ok()) {
      writer_holds =
          !writer->has_value() || std::binary_search((*writer)->begin(), (*writer)->end(), p);
    }
    // A partition whose database is gone (dropped) is not followed, whatever
    // HELD says.
    std::string current = ReadCurrentFile(r.path);
    if (current.empty()) writer_holds = false;
    Status st;
    if (held && !writer_holds) {
      rep_->Unpublish(p);
      TALLY_LOG_INFO("store", "partition {}: its writer no longer holds it; not served here", p);
    } else if (!held && writer_holds) {
      ++r.generation;
      rocksdb::DB* db = nullptr;
      rocksdb::Options opened_with;
      rocksdb::Status s = rep_->OpenDb(p, false, &db, &opened_with, &current);
      st = s.ok() ? rep_->Publish(p, db, std::move(opened_with), std::move(current))
                  : FromRocks(s, fmt::format("partition {}: opening what its writer opened", p));
      if (st.ok()) TALLY_LOG_INFO("store", "partition {}: its writer holds it; served here", p);
    } else if (held) {
      st = CatchUpPartition(p, current);
    }
    if (first.ok() && !st.ok()) first = std::move(st);
  }
  return first;
}

Status StateStore::CatchUpPartition(uint32_t p, const std::string& writer_current) {
  Partition::Rep& r = *rep_->partitions[p]->rep_;
  // A writer that reopened (after a crash, say) recovered its WAL into a
  // new SST file, while this secondary may hold the same WAL replayed in
  // its memtable: catching up would count those merges twice. So when the
  // writer's manifest changed, open a fresh secondary instead (readers
  // still holding the old one finish with it). Checked before and after
  // catching up, so a reopen racing the catch-up is seen at once.
  std::shared_ptr<rocksdb::DB> db = r.db.load();
  bool reopen = writer_current != r.current;
  if (!reopen) {
    TALLY_RETURN_IF_ERROR(
        FromRocks(db->TryCatchUpWithPrimary(), fmt::format("partition {}: catching up", p)));
    reopen = ReadCurrentFile(r.path) != r.current;
  }
  if (!reopen) {
    // The notice ids are read again only when a commit added notices:
    // every such commit rewrites the count record.
    std::string count;
    rocksdb::Status s =
        db->Get(rocksdb::ReadOptions(),
                rocksdb::Slice(kNoticeCountKey.data(), kNoticeCountKey.size()), &count);
    if (!s.ok() && !s.IsNotFound()) {
      return FromRocks(s, fmt::format("partition {}: reading the notice count", p));
    }
    if (!s.ok()) count.clear();
    if (count != r.notice_count_seen) TALLY_RETURN_IF_ERROR(r.LoadNoticeIds(db.get(), p));
    return Status::Ok();
  }
  db.reset();
  ++r.generation;
  rocksdb::DB* raw = nullptr;
  rocksdb::Options opened_with;
  std::string current;
  TALLY_RETURN_IF_ERROR(
      FromRocks(rep_->OpenDb(p, false, &raw, &opened_with, &current),
                fmt::format("partition {}: reopening after its writer restarted", p)));
  r.db.store(r.handoff->Share(raw));
  r.current = std::move(current);
  TALLY_RETURN_IF_ERROR(r.LoadNoticeIds(raw, p));
  TALLY_LOG_INFO("store", "partition {}: its writer reopened the database; following it afresh", p);
  return Status::Ok();
}

void StateStore::FollowWriter() {
  pthread_setname_np(pthread_self(), "tally-follow");
  DisablePerfCounters();
  int64_t last_warning_ms = -1000000;
  std::unique_lock<std::mutex> l(rep_->follow_mu);
  while (!rep_->follow_cv.wait_for(l, std::chrono::milliseconds(rep_->options.catch_up_interval_ms),
                                   [this] { return rep_->stopping; })) {
    l.unlock();
    Status st = CatchUp();
    const int64_t now = base::SteadyMs();
    if (!st.ok() && now - last_warning_ms >= 10000) {
      last_warning_ms = now;
      TALLY_LOG_WARN("store",
                     "catching up with the store's writer failed (answers may be stale): {}",
                     st.ToString());
    }
    l.lock();
  }
}

Status StateStore::ResetProgress() {
  if (rep_->options.read_only) return Status::FailedPrecondition("store is read-only");
  std::lock_guard<std::mutex> control(rep_->control_mu);
  for (const auto& p : rep_->partitions) {
    std::lock_guard<std::mutex> partition(p->rep_->control_mu);
    PartitionBatch b;
    b.SetProgress(Progress());
    if (p->rep_->held.load()) {
      TALLY_RETURN_IF_ERROR(p->Commit(&b));
      continue;
    }
    // Not held: on disk or not at all. Opened here for the write only.
    if (ReadCurrentFile(p->rep_->path).empty()) continue;
    rocksdb::DB* raw = nullptr;
    rocksdb::Options opened_with;
    std::string current;
    rocksdb::Status s = rep_->OpenDb(p->id(), false, &raw, &opened_with, &current);
    if (!s.ok()) return rep_->OpenFailed(p->id(), s);
    std::unique_ptr<rocksdb::DB> db(raw);
    TALLY_RETURN_IF_ERROR(FromRocks(db->Write(p->rep_->write_options, &b.rep_->wb),
                                    fmt::format("partition {}: resetting its progress", p->id())));
    TALLY_RETURN_IF_ERROR(FromRocks(db->Close(), fmt::format("partition {}: closing", p->id())));
  }
  return Status::Ok();
}

}  // namespace tally::store
