// store_notice_unread_bench: the cost of reading a user's unread notices
// (StateStore::GetNoticeUnread) and of the whole unread view (GetUnread)
// over a state holding --notices system notices and --users users who read
// up to random notices, single-threaded, as the HTTP tier reads them:
//
//   build/store/store_notice_unread_bench --notices 10000 --runs 5
//
// Each run reads every user --rounds times in a shuffled order; the tool
// prints ns per read of each run and their median, and a checksum of the
// counts read (the same state gives the same checksum, whatever the code
// that counts).
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
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
  std::string dir = (std::filesystem::temp_directory_path() / "tally-notice-bench").string();
  int64_t notices = 10000, users = 2000, rounds = 20, runs = 5, partitions = 16, compact = 1,
          seed = 1;
  base::FlagSet flags("store_notice_unread_bench",
                      "Times reading users' unread notices over a state with N notices.");
  flags.String("dir", &dir, "state directory (emptied first)");
  flags.Int("notices", &notices, "notices in the list (ids 10, 20, ...)");
  flags.Int("users", &users, "users, each with a last-read notice id");
  flags.Int("rounds", &rounds, "reads of every user per run");
  flags.Int("runs", &runs, "runs; the median is printed");
  flags.Int("partitions", &partitions, "store partitions");
  flags.Int("compact", &compact,
            "1: compact before reading (the records in table files, not memtables)");
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
  so.read_cache_bytes = 64ull << 20;  // as tally up
  so.inactive_days = 0;  // the reads are stamped at time 1: keep them through compaction
  auto opened = store::StateStore::Open(so);
  if (!opened.ok()) return Fail(opened.status());
  store::StateStore* s = opened->get();
  store::DisablePerfCounters();
  std::mt19937_64 rng(static_cast<uint64_t>(seed));

  // The notices, 100 a window, in id order.
  const uint32_t global = schemas::PartitionOf(schemas::kGlobalEntity, so.partitions);
  store::PartitionBatch b;
  for (int64_t i = 1; i <= notices; i++) {
    b.PutNotice(static_cast<uint64_t>(i) * 10, fmt::format("notice {}", i));
    if (i % 100 == 0 || i == notices) {
      if (auto st = s->partition(global)->Commit(&b); !st.ok()) return Fail(st);
      b.Clear();
    }
  }
  // Users 1..U, each having read up to a random id (between notices, on one,
  // below all of them or above all of them).
  std::vector<store::PartitionBatch> batches(so.partitions);
  for (int64_t u = 1; u <= users; u++) {
    uint64_t read = rng() % static_cast<uint64_t>(notices * 10 + 20);
    batches[schemas::PartitionOf(static_cast<uint64_t>(u), so.partitions)].SetNoticeRead(
        static_cast<uint64_t>(u), read, 1);
  }
  for (uint32_t p = 0; p < so.partitions; p++) {
    if (auto st = s->partition(p)->Commit(&batches[p]); !st.ok()) return Fail(st);
  }
  if (compact) {
    if (auto st = s->CompactAll(); !st.ok()) return Fail(st);
  }

  std::vector<uint64_t> order;
  for (int64_t r = 0; r < rounds; r++) {
    for (int64_t u = 1; u <= users; u++) order.push_back(static_cast<uint64_t>(u));
  }
  std::shuffle(order.begin(), order.end(), rng);
  auto time_reads = [&](const char* what, auto read) -> int {
    std::vector<double> ns;
    int64_t checksum = 0;
    for (int64_t run = 0; run < runs; run++) {
      checksum = 0;
      auto t0 = std::chrono::steady_clock::now();
      for (uint64_t u : order) {
        auto n = read(u);
        if (!n.ok()) return Fail(n.status());
        checksum += *n;
      }
      auto t1 = std::chrono::steady_clock::now();
      ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() /
                   static_cast<double>(order.size()));
    }
    std::vector<double> sorted = ns;
    std::sort(sorted.begin(), sorted.end());
    std::string each;
    for (double x : ns) each += fmt::format(" {:.0f}", x);
    std::printf(
        "%-16s %lld notices, %zu reads a run: median %.0f ns/read (runs:%s), checksum %lld\n", what,
        static_cast<long long>(notices), order.size(), sorted[sorted.size() / 2], each.c_str(),
        static_cast<long long>(checksum));
    return 0;
  };
  if (int rc = time_reads("GetNoticeUnread", [&](uint64_t u) { return s->GetNoticeUnread(u); }))
    return rc;
  if (int rc = time_reads("GetUnread", [&](uint64_t u) -> base::Result<int64_t> {
        auto v = s->GetUnread(u);
        if (!v.ok()) return v.status();
        return v->notice;
      })) {
    return rc;
  }
  opened->reset();
  std::filesystem::remove_all(dir);
  return 0;
}
