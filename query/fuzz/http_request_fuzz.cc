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

#include "fuzz_fixture.h"
#include "query/query_service.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tally::query::fuzz::Fixture* f = tally::query::fuzz::GetFixture();
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
