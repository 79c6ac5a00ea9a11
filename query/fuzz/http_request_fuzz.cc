// Fuzz target: the HTTP request path of the query tier (routing, ids, query
// strings, bodies) over a small real state. Input: the first line is
// "METHOD TARGET", the rest is the body. Every answer must be a known status
// with a JSON body (or the metrics text), and nothing may crash.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "query/query_service.h"
#include "store/state_store.h"

namespace {

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
Fixture* g_fixture = nullptr;

Fixture* GetFixture() {
  if (g_fixture == nullptr) {
    g_fixture = new Fixture();
    std::atexit([] {
      delete g_fixture;
      g_fixture = nullptr;
    });
  }
  return g_fixture;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture* f = GetFixture();
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t eol = in.find('\n');
  std::string_view line = in.substr(0, eol);
  std::string_view body = eol == std::string_view::npos ? std::string_view{} : in.substr(eol + 1);
  size_t sp = line.find(' ');
  tally::query::Request req;
  req.method = line.substr(0, sp);
  req.target = sp == std::string_view::npos ? std::string_view{} : line.substr(sp + 1);
  req.body = body;
  req.body_too_large = body.size() > (1 << 20);
  tally::query::Response r = f->service->Handle(req);
  switch (r.status) {
    case 200: case 202: case 400: case 401: case 404: case 405: case 413: case 500: case 501: case 503:
      break;
    default:
      std::abort();
  }
  if (r.content_type == tally::query::kJsonContentType && (r.body.empty() || r.body.front() != '{' ||
                                                            r.body.back() != '}')) {
    std::abort();
  }
  return 0;
}
