// The only file of tally that includes Boost.Beast.
#include "http_response_reader.h"

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <optional>

namespace tally::query::internal {

namespace http = boost::beast::http;
using boost::beast::error_code;
using boost::beast::string_view;

// Beast's parser with its callbacks writing into a PeerResponse.
class HttpResponseReader::Parser final : public http::basic_parser<false> {
 public:
  Parser(PeerResponse* out, uint64_t max_body_bytes, uint32_t max_header_bytes) : out_(out) {
    body_limit(max_body_bytes);
    header_limit(max_header_bytes);
    // Parse the body in the same put() as the header when the bytes are
    // there (an answer usually arrives in one read).
    eager(true);
  }

 private:
  void on_request_impl(http::verb, string_view, string_view, int, error_code& ec) override {
    ec = http::error::bad_method;  // never called for a response parser
  }
  void on_response_impl(int code, string_view, int, error_code&) override { out_->status = code; }
  void on_field_impl(http::field, string_view name, string_view value, error_code&) override {
    std::string& h = out_->headers;
    h.append(name.data(), name.size()).append(": ");
    h.append(value.data(), value.size()).append("\r\n");
  }
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<uint64_t>& length, error_code&) override {
    if (length) out_->body.reserve(static_cast<size_t>(*length));
  }
  size_t on_body_impl(string_view body, error_code&) override {
    out_->body.append(body.data(), body.size());
    return body.size();
  }
  void on_chunk_header_impl(uint64_t, string_view, error_code&) override {}
  size_t on_chunk_body_impl(uint64_t, string_view body, error_code&) override {
    out_->body.append(body.data(), body.size());
    return body.size();
  }
  void on_finish_impl(error_code&) override {}

  PeerResponse* out_;
};

struct HttpResponseReader::Storage {
  std::optional<Parser> parser;
};

HttpResponseReader::HttpResponseReader(uint64_t max_body_bytes, uint32_t max_header_bytes)
    : max_body_bytes_(max_body_bytes),
      max_header_bytes_(max_header_bytes),
      storage_(std::make_unique<Storage>()) {}

HttpResponseReader::~HttpResponseReader() = default;

void HttpResponseReader::Start(PeerResponse* out) {
  out_ = out;
  out_->status = 0;
  out_->headers.clear();
  out_->body.clear();
  storage_->parser.emplace(out, max_body_bytes_, max_header_bytes_);
  skipped_interim_ = false;
  error_.clear();
}

HttpResponseReader::State HttpResponseReader::Feed(std::string_view bytes, size_t* consumed) {
  *consumed = 0;
  while (!bytes.empty()) {
    Parser& p = *storage_->parser;  // a new one after an interim answer
    error_code ec;
    size_t n = p.put(boost::asio::const_buffer(bytes.data(), bytes.size()), ec);
    *consumed += n;
    bytes.remove_prefix(n);
    if (ec == http::error::need_more) return State::kNeedMore;
    if (ec) {
      error_ = ec.message();
      return State::kError;
    }
    if (p.is_done()) {
      // An interim answer (100 Continue and the like; 101 ends HTTP here)
      // comes before the real one: skip it.
      if (out_->status >= 100 && out_->status < 200 && out_->status != 101) {
        Start(out_);
        skipped_interim_ = true;
        continue;
      }
      return State::kDone;
    }
    if (n == 0) return State::kNeedMore;
  }
  return State::kNeedMore;
}

HttpResponseReader::State HttpResponseReader::FeedEof() {
  Parser& p = *storage_->parser;
  if (!p.got_some()) {
    error_ = "connection closed before an answer";
    return State::kError;
  }
  error_code ec;
  p.put_eof(ec);
  if (ec) {
    error_ = "connection closed within an answer (" + ec.message() + ")";
    return State::kError;
  }
  return p.is_done() ? State::kDone : State::kError;
}

bool HttpResponseReader::got_some() const {
  return skipped_interim_ || storage_->parser->got_some();
}

bool HttpResponseReader::keep_alive() const { return storage_->parser->keep_alive(); }

}  // namespace tally::query::internal
