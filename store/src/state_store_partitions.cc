// The partitions a store holds: publishing a partition's database to
// readers and taking it away again (OpenPartition, ClosePartition,
// DropPartition at run time; Open and a follower's CatchUp use the same
// steps), the HELD file that tells followers, and the status a read of a
// partition not held answers.
//
// How a close stays out of the readers' way: readers load a partition's
// database (an atomic shared_ptr) as they always did, and a null one means
// "not held". A close swaps in null first, so reads that start after it
// answer NotHeldError, then waits for the reads that loaded the database
// before (DbHandoff) and closes it itself. Nothing is added to a read.
#include <fmt/core.h>
#include <rocksdb/db.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/log.h"
#include "counter_cache.h"
#include "format1.h"
#include "state_store_impl.h"
#include "store/state_store.h"
#include "write_health.h"

namespace tally::store {

namespace fs = std::filesystem;
using base::Result;
using base::Status;

namespace {
constexpr std::string_view kNotHeldOne = " is not held here";
constexpr std::string_view kNotHeldMany = " are not held here";
}  // namespace

Status NotHeldError(std::span<const uint32_t> partitions) {
  if (partitions.size() == 1) {
    return Status::Unavailable(fmt::format("partition {}{}", partitions[0], kNotHeldOne));
  }
  std::string list;
  for (uint32_t p : partitions) {
    if (!list.empty()) list += ", ";
    list += std::to_string(p);
  }
  return Status::Unavailable(fmt::format("partitions {}{}", list, kNotHeldMany));
}

Status NotHeld(uint32_t partition) {
  return NotHeldError(std::span<const uint32_t>(&partition, 1));
}

bool IsNotHeld(const Status& st) {
  if (st.code() != base::StatusCode::kUnavailable) return false;
  std::string_view m = st.message();
  return m.ends_with(kNotHeldOne) || m.ends_with(kNotHeldMany);
}

std::vector<uint32_t> NotHeldPartitions(const Status& st) {
  std::vector<uint32_t> out;
  if (!IsNotHeld(st)) return out;
  std::string_view m = st.message();
  m.remove_suffix(m.ends_with(kNotHeldOne) ? kNotHeldOne.size() : kNotHeldMany.size());
  // "...partition 5" or "...partitions 3, 5": the list follows the last
  // "partition" (context added in front may say "partition" too).
  size_t at = m.rfind("partition");
  if (at == std::string_view::npos) return out;
  m.remove_prefix(at + std::string_view("partition").size());
  uint64_t v = 0;
  bool digits = false;
  for (char c : m) {
    if (c >= '0' && c <= '9') {
      v = v * 10 + static_cast<uint64_t>(c - '0');
      digits = true;
    } else if (digits) {
      out.push_back(static_cast<uint32_t>(v));
      v = 0;
      digits = false;
    }
  }
  if (digits) out.push_back(static_cast<uint32_t>(v));
  return out;
}

void Normalize(MissingPartitions* missing) {
  std::sort(missing->partitions.begin(), missing->partitions.end());
  missing->partitions.erase(std::unique(missing->partitions.begin(), missing->partitions.end()),
                            missing->partitions.end());
  std::sort(missing->positions.begin(), missing->positions.end());
}

Status StateStore::Rep::Publish(uint32_t i, rocksdb::DB* db, rocksdb::Options opened_with,
                                std::string current) {
  Partition::Rep& r = *partitions[i]->rep_;
  if (!r.read_only) {
    if (Status st =
            ConvertFormat1Posts(db, static_cast<uint32_t>(partitions.size()), i, r.write_options);
        !st.ok()) {
      delete db;
      return st;
    }
  }
  // The notice ids before the database: a reader that finds the database
  // finds its notice list too.
  if (Status st = r.LoadNoticeIds(db, i); !st.ok()) {
    delete db;
    return st;
  }
  opened_with.create_if_missing = false;  // a reopen after a write error must find it
  r.options = std::move(opened_with);
  r.current = std::move(current);
  r.primary_closed = false;
  if (r.health != nullptr) r.health->Reset();
  r.db.store(r.handoff->Share(db));
  r.held.store(true, std::memory_order_release);
  return Status::Ok();
}

void StateStore::Rep::Unpublish(uint32_t i) {
  Partition::Rep& r = *partitions[i]->rep_;
  r.held.store(false, std::memory_order_release);
  // From here reads and commits that load the database find none; those
  // that loaded it before finish with it, and the close waits for them.
  if (std::shared_ptr<rocksdb::DB> db = r.db.exchange(nullptr)) {
    rocksdb::Status s = r.handoff->CloseWhenReleased(std::move(db));
    if (!s.ok()) TALLY_LOG_WARN("store", "partition {}: closing: {}", i, s.ToString());
  }
  // No reader or commit holds the database now, so nothing publishes into
  // these after them.
  r.notice_ids.store(nullptr);
  r.notice_count_seen.clear();
  if (cache != nullptr) {
    // Its records must not be served while it is not held, nor come back
    // stale if it opens again (with what another member applied meanwhile).
    const uint32_t n = static_cast<uint32_t>(partitions.size());
    cache->ClearIf([i, n](uint64_t id) { return schemas::PartitionOf(id, n) == i; });
    if (i == GlobalId()) cache->InvalidateRedDots();
  }
  if (r.health != nullptr) r.health->Reset();
  r.options = rocksdb::Options();  // its info log and SstFileManager go too
  r.primary_closed = false;
  if (r.read_only) {
    std::error_code ec;
    fs::remove_all(fmt::format("{}.{}", r.secondary_base, r.generation), ec);
  }
}

std::vector<uint32_t> StateStore::Rep::Held() const {
  std::vector<uint32_t> held;
  for (const auto& p : partitions) {
    if (p->rep_->held.load(std::memory_order_acquire)) held.push_back(p->id());
  }
  return held;
}

void StateStore::Rep::RecordHeld() {
  if (Status st = WriteHeldFile(options.dir, Held()); !st.ok()) {
    TALLY_LOG_WARN("store",
                   "recording the partitions held: {} (read-only followers do not see the "
                   "change until it is recorded)",
                   st.ToString());
  }
}

namespace {
Status CheckControl(const StoreOptions& options, uint32_t p, uint32_t partitions,
                    const char* what) {
  if (p >= partitions) {
    return Status::InvalidArgument(
        fmt::format("{} partition {}: the state has {}", what, p, partitions));
  }
  if (options.read_only) {
    return Status::FailedPrecondition(fmt::format(
        "{} partition {}: the store is read-only (it holds what its writer holds)", what, p));
  }
  return Status::Ok();
}
}  // namespace

Status StateStore::OpenPartition(uint32_t p) {
  TALLY_RETURN_IF_ERROR(CheckControl(rep_->options, p, partitions(), "opening"));
  std::lock_guard<std::mutex> control(rep_->control_mu);
  Partition::Rep& r = *rep_->partitions[p]->rep_;
  std::lock_guard<std::mutex> partition(r.control_mu);
  if (r.held.load()) return Status::Ok();
  // Opening writes (a MANIFEST, a WAL, the WAL's records flushed): not
  // below the reserve, where the partition could not apply anything anyway.
  if (rep_->reserve != nullptr) {
    if (Status full = rep_->reserve->Check(); !full.ok()) {
      return Status::ResourceExhausted(
          fmt::format("cannot open {}/{}: {}", dir(), PartitionDirName(p), full.message()));
    }
  }
  rocksdb::DB* db = nullptr;
  rocksdb::Options opened_with;
  std::string current;
  rocksdb::Status s = rep_->OpenDb(p, /*create_if_missing=*/true, &db, &opened_with, &current);
  if (!s.ok()) return rep_->OpenFailed(p, s);
  TALLY_RETURN_IF_ERROR(rep_->Publish(p, db, std::move(opened_with), std::move(current)));
  rep_->RecordHeld();
  TALLY_LOG_INFO("store", "partition {}: opened", p);
  return Status::Ok();
}

Status StateStore::OpenPartitions(const std::vector<uint32_t>& ps) {
  for (uint32_t p : ps)
    TALLY_RETURN_IF_ERROR(CheckControl(rep_->options, p, partitions(), "opening"));
  std::lock_guard<std::mutex> control(rep_->control_mu);
  std::vector<uint32_t> to_open;
  for (uint32_t p : ps) {
    if (!rep_->partitions[p]->rep_->held.load()) to_open.push_back(p);
  }
  if (to_open.empty()) return Status::Ok();
  if (rep_->reserve != nullptr) {
    if (Status full = rep_->reserve->Check(); !full.ok()) {
      return Status::ResourceExhausted(
          fmt::format("cannot open partitions of {}: {}", dir(), full.message()));
    }
  }
  // As StateStore::Open: the databases open concurrently, then each is
  // published by its partition (under its lock) on this thread.
  std::vector<Rep::Opened> opened = rep_->OpenDbs(to_open, /*create_if_missing=*/true);
  Status failed;
  for (size_t k = 0; k < to_open.size(); k++) {
    if (!opened[k].status.ok()) {
      if (failed.ok()) failed = rep_->OpenFailed(to_open[k], opened[k].status);
      continue;
    }
    Partition::Rep& r = *rep_->partitions[to_open[k]]->rep_;
    std::lock_guard<std::mutex> partition(r.control_mu);
    Status st = rep_->Publish(to_open[k], opened[k].db, std::move(opened[k].options),
                              std::move(opened[k].current));
    if (!st.ok() && failed.ok()) failed = st;
  }
  rep_->RecordHeld();
  TALLY_LOG_INFO("store", "partitions {}..{} ({}): opened", to_open.front(), to_open.back(),
                 to_open.size());
  return failed;
}

Status StateStore::ClosePartition(uint32_t p) {
  TALLY_RETURN_IF_ERROR(CheckControl(rep_->options, p, partitions(), "closing"));
  std::lock_guard<std::mutex> control(rep_->control_mu);
  Partition::Rep& r = *rep_->partitions[p]->rep_;
  std::lock_guard<std::mutex> partition(r.control_mu);
  if (!r.held.load()) return Status::Ok();
  rep_->Unpublish(p);
  rep_->RecordHeld();
  TALLY_LOG_INFO("store", "partition {}: closed", p);
  return Status::Ok();
}

Status StateStore::DropPartition(uint32_t p) {
  TALLY_RETURN_IF_ERROR(CheckControl(rep_->options, p, partitions(), "dropping"));
  std::lock_guard<std::mutex> control(rep_->control_mu);
  Partition::Rep& r = *rep_->partitions[p]->rep_;
  std::lock_guard<std::mutex> partition(r.control_mu);
  if (r.held.load()) {
    rep_->Unpublish(p);
    // Followers learn that it is gone before its files go.
    rep_->RecordHeld();
  }
  std::error_code ec;
  fs::remove_all(r.path, ec);
  if (ec) return Status::IOError(fmt::format("deleting {}: {}", r.path, ec.message()));
  TALLY_LOG_INFO("store", "partition {}: dropped (deleted {})", p, r.path);
  return Status::Ok();
}

bool StateStore::HoldsPartition(uint32_t p) const {
  return p < partitions() && rep_->partitions[p]->rep_->held.load(std::memory_order_acquire);
}

std::vector<uint32_t> StateStore::HeldPartitions() const { return rep_->Held(); }

}  // namespace tally::store
