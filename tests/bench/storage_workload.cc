// tally-bench: the storage workload (bench.h).
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/log.h"
#include "bench.h"
#include "store/state_store.h"

namespace tally::bench {

using base::Result;
using base::Status;

// ---- storage ----------------------------------------------------------------

Status Bench::Storage(WorkloadResult* r) {
  r->workload = "storage";
  r->unit = "B/post disk";
  r->baseline = "redis used_memory B/post";
  r->target = "<= 8 B/post, <= 1/8 redis, RSS <= cache+150MB";
  const uint64_t n = static_cast<uint64_t>(f_.storage_posts);
  const uint64_t stride = static_cast<uint64_t>(std::max<int64_t>(f_.storage_id_stride, 1));
  const std::string dir = Path("storage");
  std::filesystem::remove_all(dir);
  auto counters = [](uint64_t id, int64_t out[4]) {
    uint64_t h = id * 0x9E3779B97F4A7C15ULL;
    out[0] = 1 + static_cast<int64_t>((h >> 8) % 1000);    // like
    out[1] = 1 + static_cast<int64_t>((h >> 20) % 100);    // repost
    out[2] = 1 + static_cast<int64_t>((h >> 32) % 50);     // comment
    out[3] = 1 + static_cast<int64_t>((h >> 40) % 20000);  // view
  };
  {
    store::StoreOptions so;
    so.dir = dir;
    so.partitions = static_cast<uint32_t>(f_.partitions);
    so.block_cache_bytes = static_cast<size_t>(f_.block_cache_mb) << 20;
    auto st = store::StateStore::Open(so);
    if (!st.ok()) return st.status();
    std::vector<std::unique_ptr<store::PartitionBatch>> batches(so.partitions);
    for (auto& b : batches) b = std::make_unique<store::PartitionBatch>();
    auto t0 = Clock::now();
    auto last = t0;
    for (uint64_t i = 1; i <= n; i++) {
      const uint64_t id = i * stride;
      int64_t v[4];
      counters(i, v);
      store::CounterOp ops[4] = {store::CounterOp::Add(v[0]), store::CounterOp::Add(v[1]),
                                 store::CounterOp::Add(v[2]), store::CounterOp::Add(v[3])};
      uint32_t p = schemas::PartitionOf(id, so.partitions);
      batches[p]->MergePostCounters(id, ops);
      if (batches[p]->Count() >= 10000 || i == n) {
        TALLY_RETURN_IF_ERROR((*st)->partition(p)->Commit(batches[p].get()));
        batches[p]->Clear();
      }
      if (SecondsSince(last) >= 2) {
        last = Clock::now();
        Progress(fmt::format("storage: {}/{} posts written", i, n));
      }
    }
    for (uint32_t p = 0; p < so.partitions; p++) {
      if (batches[p]->Count() == 0) continue;
      TALLY_RETURN_IF_ERROR((*st)->partition(p)->Commit(batches[p].get()));
    }
    r->extra["write_s"] = SecondsSince(t0);
    Progress("storage: compacting");
    auto t1 = Clock::now();
    TALLY_RETURN_IF_ERROR((*st)->CompactAll());
    r->extra["compact_s"] = SecondsSince(t1);
  }
  uint64_t disk = DirBytes(dir);
  uint64_t sst = DirBytes(dir, ".sst");
  r->value = static_cast<double>(disk) / static_cast<double>(n);
  r->disk_mb = Mb(disk);
  r->extra["sst_bytes_per_post"] = static_cast<double>(sst) / static_cast<double>(n);
  if (stride > 1) r->extra["id_stride"] = static_cast<double>(stride);

  Progress(fmt::format("storage: the same {} posts into redis as hashes", n));
  TALLY_RETURN_IF_ERROR(RedisCommand(redis_port_, {"FLUSHALL", "ASYNC"}).status());
  redis_query_data_ = false;
  auto used = [&]() -> Result<double> {
    auto info = RedisCommand(redis_port_, {"INFO", "memory"});
    if (!info.ok()) return info.status();
    size_t at = info->find("used_memory:");
    if (at == std::string::npos) return Status::Internal("INFO memory without used_memory");
    return std::strtod(info->c_str() + at + 12, nullptr);
  };
  auto used0 = used();
  if (!used0.ok()) return used0.status();
  constexpr uint64_t kChunk = 1000000;
  for (uint64_t lo = 1; lo <= n; lo += kChunk) {
    RedisPipe pipe;
    for (uint64_t i = lo; i < lo + kChunk && i <= n; i++) {
      int64_t v[4];
      counters(i, v);
      AddPostHash(&pipe, fmt::format("p:{}", i * stride), v);
    }
    uint64_t errors = 0;
    auto secs = pipe.Send(redis_port_, &errors);
    if (!secs.ok()) return secs.status();
    if (errors) return Status::Internal("redis refused the storage data");
    Progress(fmt::format("storage: {}/{} posts in redis", std::min(n, lo + kChunk - 1), n));
  }
  auto used1 = used();
  if (!used1.ok()) return used1.status();
  r->baseline_value = (*used1 - *used0) / static_cast<double>(n);
  r->ratio = r->value / r->baseline_value;
  TALLY_RETURN_IF_ERROR(RedisCommand(redis_port_, {"FLUSHALL", "ASYNC"}).status());

  // RSS of the server over that state, under load on random posts (ids
  // 1..N: with a stride, most of them have no counts).
  Progress("storage: tally serve over it, under wrk");
  Process serve;
  int port = FreePort();
  TALLY_RETURN_IF_ERROR(serve.Start(
      TallyArgs({"serve", "--state-dir", dir, "--http", fmt::format("127.0.0.1:{}", port),
                 "--block-cache-mb", std::to_string(f_.block_cache_mb), "--log-level", "warn",
                 PinsQueries() ? "--http-threads=1" : "--http-threads=2"}),
      Path("serve-storage.log")));
  if (!WaitForPort(port, 30))
    return Status::Unavailable("tally serve did not listen; see " + Path("serve-storage.log"));
  double cpu = 0;
  auto m = Wrk(port, "post", n, 1, &serve, &cpu);
  if (!m.ok()) return m.status();
  r->rss_mb = Mb(serve.RssBytes());
  r->extra["serve_peak_rss_mb"] = Mb(serve.PeakRssBytes());
  r->extra["serve_rps"] = m->at("rps");
  r->extra["rss_budget_mb"] = static_cast<double>(f_.block_cache_mb + 150);
  serve.Stop();
  r->met = r->value <= 8 && r->ratio <= 0.125 &&
           r->extra["serve_peak_rss_mb"] <= r->extra["rss_budget_mb"];
  return Status::Ok();
}

}  // namespace tally::bench
