// The state the query fuzz targets answer from: a small real store (two
// partitions, one post, one follow) and a QueryService over it, built on
// the first input and removed at exit. Fuzz-only.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "query/query_service.h"
#include "schemas/delta.h"
#include "store/state_store.h"

namespace tally::query::fuzz {

struct Fixture {
  std::filesystem::path dir;
  std::unique_ptr<tally::store::StateStore> store;
  std::unique_ptr<tally::query::QueryService> service;
  Fixture() {
    namespace fs = std::filesystem;
    dir = fs::temp_directory_path() / ("tally-http-fuzz-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    tally::store::StoreOptions o;
    o.dir = dir.string();
    o.partitions = 2;
    o.block_cache_bytes = 4 << 20;
    auto s = tally::store::StateStore::Open(o);
    if (!s.ok()) std::abort();
    store = std::move(s).value();
    tally::store::PartitionBatch b;
    tally::store::CounterOp ops[4] = {tally::store::CounterOp::Add(3), {}, {}, {}};
    b.MergePostCounters(7, ops);
    b.PutFollow(7, 8);
    if (!store->partition(tally::schemas::PartitionOf(7, 2))->Commit(&b).ok()) std::abort();
    tally::query::QueryServiceOptions q;
    q.store = store.get();
    q.info = {"fuzz", "", {"tally.events"}, o.dir, 2};
    q.ready = [] { return true; };
    service = std::make_unique<tally::query::QueryService>(std::move(q));
  }
  ~Fixture() {
    service.reset();
    store.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

// Built on the first input, destroyed at exit (not at static destruction,
// whose order against RocksDB's own statics is unspecified), so that no run
// leaves its state directory behind in the temp directory.
inline Fixture* g_fixture = nullptr;

inline Fixture* GetFixture() {
  if (g_fixture == nullptr) {
    g_fixture = new Fixture();
    std::atexit([] {
      delete g_fixture;
      g_fixture = nullptr;
    });
  }
  return g_fixture;
}

}  // namespace tally::query::fuzz
