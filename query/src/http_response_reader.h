// HttpResponseReader: parses HTTP/1.1 answers from the bytes of one
// connection, for PeerClient. Boost.Beast's parser does the HTTP (status
// line, fields, Content-Length or chunked or read-to-close bodies, limits);
// this class keeps Beast out of every other file and writes straight into
// a PeerResponse, with no allocation beyond its strings.
//
// Thread model: externally synchronized (one per connection).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "query/peer_client.h"

namespace tally::query::internal {

class HttpResponseReader {
 public:
  enum class State {
    kNeedMore,  // feed more bytes (or FeedEof)
    kDone,      // a whole answer is in *out
    kError,     // not HTTP, or over a limit: error() says what; the connection is unusable
  };

  HttpResponseReader(uint64_t max_body_bytes, uint32_t max_header_bytes);
  ~HttpResponseReader();
  HttpResponseReader(const HttpResponseReader&) = delete;
  HttpResponseReader& operator=(const HttpResponseReader&) = delete;

  // Starts reading a new answer into *out (borrowed until kDone, kError or
  // the next Start), clearing its status, headers and body.
  void Start(PeerResponse* out);

  // Parses the next bytes of the connection. *consumed: how many of them
  // were used; the caller drops those and presents the rest (with more
  // appended) next time. Header bytes are only consumed once the header is
  // complete, so the caller keeps them contiguous. Interim answers (1xx)
  // are skipped.
  State Feed(std::string_view bytes, size_t* consumed);

  // The peer closed the connection: kDone if that ends the answer (one
  // without Content-Length or chunking), else kError.
  State FeedEof();

  // True once any byte of the current answer has been parsed.
  bool got_some() const;
  // After kDone: whether the connection may carry another request.
  bool keep_alive() const;
  // After kError: what was wrong.
  const std::string& error() const { return error_; }

 private:
  class Parser;
  struct Storage;

  uint64_t max_body_bytes_;
  uint32_t max_header_bytes_;
  PeerResponse* out_ = nullptr;
  // The current parser, in storage allocated once (Beast's parsers cannot
  // be reset; one is built in place for every answer).
  std::unique_ptr<Storage> storage_;
  bool skipped_interim_ = false;  // a 1xx was skipped: got_some() holds
  std::string error_;
};

}  // namespace tally::query::internal
