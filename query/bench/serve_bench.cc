// query_serve_bench: fills a state directory with N posts and serves it over
// HTTP, for load tests of the query path with wrk (query/README.md,
// "Performance"):
//
//   query_serve_bench --posts 100000 --listen 127.0.0.1:8080 &
//   wrk -t2 -c64 -d10s -s query/bench/random_post.lua http://127.0.0.1:8080
//
// Post i (1..N) gets like=i%1000, repost=i%100, comment=i%10, view=i.
#include <fmt/core.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "base/flags.h"
#include "base/shutdown.h"
#include "query/http_server.h"
#include "query/query_service.h"
#include "schemas/delta.h"
#include "store/state_store.h"

using namespace tally;  // NOLINT: a small program

int main(int argc, char** argv) {
  std::string dir = (std::filesystem::temp_directory_path() / "tally-query-bench").string();
  std::string listen = "127.0.0.1:8080";
  int64_t posts = 100000, partitions = 16, threads = 2, keep = 0;
  base::FlagSet flags("query_serve_bench", "Fills a store with N posts and serves it over HTTP.");
  flags.String("dir", &dir, "state directory (emptied first unless --keep)");
  flags.String("listen", &listen, "HOST:PORT to serve on");
  flags.Int("posts", &posts, "number of posts to write (ids 1..N)");
  flags.Int("partitions", &partitions, "store partitions");
  flags.Int("threads", &threads, "HTTP I/O threads");
  flags.Int("keep", &keep, "1: serve an existing directory without refilling it");
  bool help = false;
  if (auto st = flags.Parse(argc - 1, argv + 1, &help); !st.ok() || help) {
    std::fprintf(stderr, "%s\n%s", st.ToString().c_str(), flags.Usage().c_str());
    return help ? 0 : 2;
  }
  if (!keep) std::filesystem::remove_all(dir);

  store::StoreOptions so;
  so.dir = dir;
  so.partitions = static_cast<uint32_t>(partitions);
  auto store = store::StateStore::Open(so);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  if (!keep) {
    std::vector<std::unique_ptr<store::PartitionBatch>> batches(so.partitions);
    for (auto& b : batches) b = std::make_unique<store::PartitionBatch>();
    for (uint64_t id = 1; id <= static_cast<uint64_t>(posts); id++) {
      store::CounterOp ops[4] = {store::CounterOp::Add(static_cast<int64_t>(id % 1000)),
                                 store::CounterOp::Add(static_cast<int64_t>(id % 100)),
                                 store::CounterOp::Add(static_cast<int64_t>(id % 10)),
                                 store::CounterOp::Add(static_cast<int64_t>(id))};
      uint32_t p = schemas::PartitionOf(id, so.partitions);
      batches[p]->MergePostCounters(id, ops);
      if (batches[p]->Count() >= 10000) {
        if (auto st = (*store)->partition(p)->Commit(batches[p].get()); !st.ok()) {
          std::fprintf(stderr, "%s\n", st.ToString().c_str());
          return 1;
        }
        batches[p]->Clear();
      }
    }
    for (uint32_t p = 0; p < so.partitions; p++) {
      if (batches[p]->Count() == 0) continue;
      if (auto st = (*store)->partition(p)->Commit(batches[p].get()); !st.ok()) {
        std::fprintf(stderr, "%s\n", st.ToString().c_str());
        return 1;
      }
    }
    std::fprintf(stderr, "wrote %lld posts to %s\n", static_cast<long long>(posts), dir.c_str());
  }

  query::QueryServiceOptions qo;
  qo.store = store->get();
  qo.info.version = "bench";
  qo.info.state_dir = dir;
  qo.info.partitions = so.partitions;
  query::QueryService service(std::move(qo));
  query::ServerOptions server_options;
  server_options.listen = listen;
  server_options.threads = static_cast<int>(threads);
  auto server = query::HttpServer::Start(server_options, &service);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "serving on port %u; SIGINT to stop\n", (*server)->bound_port());
  base::InstallShutdownHandlers();
  base::WaitForShutdown(-1);
  (*server)->Stop();
  return 0;
}
