// store_read_bench: the cost of the store's reads as the HTTP tier makes
// them, on --threads threads at once: a post's counts (GetPostCounts of
// one id), a timeline batch (GetPostCounts of --batch ids), a user's counts
// and a user's whole unread view (GetUnread: the unread counters, the
// notice count, the red dots, and a feed snapshot of --followees followees
// whose post counts are read).
//
//   build/store/store_read_bench --threads 2 --runs 5
//   build/store/store_read_bench --cache-mb 0     # every read goes to RocksDB
//
// Each run does --reads reads of each kind per thread, ids drawn from a
// fixed random sequence, after one run that warms the caches up; the tool
// prints ns per read (wall time of the run divided by the reads of one
// thread) of each run and their median, and a checksum of what was read
// (the same state gives the same checksum).
#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/flags.h"
#include "schemas/delta.h"
#include "store/state_store.h"

using namespace tally;  // NOLINT: a small program

namespace {

int Fail(const base::Status& st) {
  std::fprintf(stderr, "%s\n", st.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = (std::filesystem::temp_directory_path() / "tally-read-bench").string();
  int64_t posts = 200000, users = 20000, followees = 50, batch = 20, reads = 200000, runs = 5,
          threads = 2, partitions = 16, cache_mb = 64, compact = 1, seed = 1;
  base::FlagSet flags("store_read_bench", "Times the store's reads on several threads.");
  flags.String("dir", &dir, "state directory (emptied first)");
  flags.Int("posts", &posts, "posts with counts (ids 1..N)");
  flags.Int("users", &users, "users with counts, unread counters and a feed snapshot");
  flags.Int("followees", &followees, "followees of each user (feed unread reads their counts)");
  flags.Int("batch", &batch, "ids in a timeline read");
  flags.Int("reads", &reads, "reads of each kind per thread per run (unread: a tenth)");
  flags.Int("runs", &runs, "runs; the median is printed");
  flags.Int("threads", &threads, "reading threads");
  flags.Int("partitions", &partitions, "store partitions");
  flags.Int("cache-mb", &cache_mb, "read cache (0: none)");
  flags.Int("compact", &compact, "1: compact before reading");
  flags.Int("seed", &seed, "random seed");
  bool help = false;
  if (auto st = flags.Parse(argc - 1, argv + 1, &help); !st.ok() || help) {
    std::fprintf(stderr, "%s\n%s", st.ToString().c_str(), flags.Usage().c_str());
    return help ? 0 : 2;
  }
  std::filesystem::remove_all(dir);
  store::StoreOptions so;
  so.dir = dir;
  so.partitions = static_cast<uint32_t>(partitions);
  so.read_cache_bytes = static_cast<uint64_t>(cache_mb) << 20;
  so.inactive_days = 0;
  auto opened = store::StateStore::Open(so);
  if (!opened.ok()) return Fail(opened.status());
  store::StateStore* s = opened->get();
  store::DisablePerfCounters();
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  const uint32_t n = so.partitions;

  std::vector<store::PartitionBatch> batches(n);
  auto flush = [&](bool all) -> base::Status {
    for (uint32_t p = 0; p < n; p++) {
      if (batches[p].Count() == 0 || (!all && batches[p].Count() < 10000)) continue;
      TALLY_RETURN_IF_ERROR(s->partition(p)->Commit(&batches[p]));
      batches[p].Clear();
    }
    return base::Status::Ok();
  };
  for (uint64_t id = 1; id <= static_cast<uint64_t>(posts); id++) {
    store::CounterOp ops[4] = {store::CounterOp::Add(static_cast<int64_t>(id % 1000)),
                               store::CounterOp::Add(static_cast<int64_t>(id % 100)),
                               store::CounterOp::Add(static_cast<int64_t>(id % 10)),
                               store::CounterOp::Add(static_cast<int64_t>(id))};
    batches[schemas::PartitionOf(id, n)].MergePostCounters(id, ops);
    if (auto st = flush(false); !st.ok()) return Fail(st);
  }
  const uint32_t global = schemas::PartitionOf(schemas::kGlobalEntity, n);
  for (uint64_t i = 1; i <= 100; i++) batches[global].PutNotice(i * 10, "notice");
  batches[global].MaxRedDot("discover", 5);
  for (uint64_t u = 1; u <= static_cast<uint64_t>(users); u++) {
    store::PartitionBatch& b = batches[schemas::PartitionOf(u, n)];
    store::CounterOp uops[3] = {store::CounterOp::Add(static_cast<int64_t>(u % 50)),
                                store::CounterOp::Add(static_cast<int64_t>(u % 70)),
                                store::CounterOp::Add(followees)};
    b.MergeUserCounters(u, uops);
    store::CounterOp nops[6] = {};
    nops[0] = store::CounterOp::Add(1);
    nops[1] = store::CounterOp::Add(2);
    nops[5] = store::CounterOp::Add(static_cast<int64_t>(u % 5));
    b.MergeUnreadCounters(u, nops);
    b.SetNoticeRead(u, (u % 100) * 10, 1);
    std::vector<std::pair<uint64_t, uint64_t>> snap;
    for (int64_t f = 0; f < followees; f++) {
      uint64_t target = 1 + rng() % static_cast<uint64_t>(users);
      b.PutFollow(u, target);
      snap.emplace_back(target, 0);
    }
    std::sort(snap.begin(), snap.end());
    snap.erase(std::unique(snap.begin(), snap.end(),
                           [](const auto& a, const auto& c) { return a.first == c.first; }),
               snap.end());
    b.PutFeedSnapshot(u, 1, snap.data(), snap.size());
    if (auto st = flush(false); !st.ok()) return Fail(st);
  }
  if (auto st = flush(true); !st.ok()) return Fail(st);
  if (compact) {
    if (auto st = s->CompactAll(); !st.ok()) return Fail(st);
  }

  // The ids each thread reads, the same every run.
  std::vector<uint64_t> post_ids(static_cast<size_t>(reads * batch));
  for (auto& id : post_ids) id = 1 + rng() % static_cast<uint64_t>(posts);
  std::vector<uint64_t> user_ids(static_cast<size_t>(reads));
  for (auto& id : user_ids) id = 1 + rng() % static_cast<uint64_t>(users);

  // read(thread, i): the i-th read of a thread; returns a checksum term or -1.
  auto time_reads = [&](const char* what, int64_t count, auto read) -> int {
    std::vector<double> ns;
    int64_t checksum = 0;
    // Run -1 warms the caches up and is not counted.
    for (int64_t run = -1; run < runs; run++) {
      std::atomic<int64_t> sum{0};
      std::atomic<bool> failed{false};
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> ts;
      for (int64_t t = 0; t < threads; t++) {
        ts.emplace_back([&, t] {
          store::DisablePerfCounters();
          int64_t local = 0;
          for (int64_t i = 0; i < count; i++) {
            // Threads start at different places of the sequence.
            int64_t r = read((i + t * 7919) % count);
            if (r < 0) {
              failed = true;
              return;
            }
            local += r;
          }
          sum += local;
        });
      }
      for (auto& th : ts) th.join();
      auto t1 = std::chrono::steady_clock::now();
      if (failed) {
        std::fprintf(stderr, "%s: a read failed\n", what);
        return 1;
      }
      checksum = sum.load();
      if (run < 0) continue;
      ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() /
                   static_cast<double>(count));
    }
    std::vector<double> sorted = ns;
    std::sort(sorted.begin(), sorted.end());
    std::string each;
    for (double x : ns) each += fmt::format(" {:.0f}", x);
    std::printf("%-14s %lld threads: median %.0f ns/read (runs:%s), checksum %lld\n", what,
                static_cast<long long>(threads), sorted[sorted.size() / 2], each.c_str(),
                static_cast<long long>(checksum));
    return 0;
  };
  if (int rc = time_reads("post", reads, [&](int64_t i) -> int64_t {
        std::vector<store::PostCounts> out;
        auto st =
            s->GetPostCounts(std::span<const uint64_t>(&post_ids[static_cast<size_t>(i)], 1), &out);
        return st.ok() ? out[0].like : -1;
      })) {
    return rc;
  }
  if (int rc = time_reads("timeline", reads / batch, [&](int64_t i) -> int64_t {
        std::vector<store::PostCounts> out;
        auto st =
            s->GetPostCounts(std::span<const uint64_t>(&post_ids[static_cast<size_t>(i * batch)],
                                                       static_cast<size_t>(batch)),
                             &out);
        if (!st.ok()) return -1;
        int64_t sum = 0;
        for (const auto& pc : out) sum += pc.like;
        return sum;
      })) {
    return rc;
  }
  if (int rc = time_reads("user", reads, [&](int64_t i) -> int64_t {
        auto uc = s->GetUserCounts(user_ids[static_cast<size_t>(i)]);
        return uc.ok() ? uc->followers : -1;
      })) {
    return rc;
  }
  if (int rc = time_reads("unread", reads / 10, [&](int64_t i) -> int64_t {
        auto v = s->GetUnread(user_ids[static_cast<size_t>(i)]);
        return v.ok() ? v->notice + v->feed + v->counters.counts[0] : -1;
      })) {
    return rc;
  }
  opened->reset();
  std::filesystem::remove_all(dir);
  return 0;
}
