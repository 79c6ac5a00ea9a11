// The transport's HTTP/1.1 semantics where a lenient parser would let a
// request through that RFC 9112 or RFC 9110 refuses: transfer codings,
// obsolete line folding, Expect: 100-continue, Upgrade.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "http_server_fixture.h"
#include "query/http_server.h"
#include "query/query_service.h"

namespace tally::query {
namespace {

constexpr char kGet7[] = "GET /v1/posts/7/counts HTTP/1.1\r\nHost: test\r\n\r\n";

bool IsError(const HttpResponse& r, int status, const std::string& code) {
  return r.status == status && r.body.rfind("{\"error\":{\"code\":\"" + code + "\",", 0) == 0;
}

// A transfer coding tally does not decode is 501, never a body read as if
// it were plain (RFC 9112 section 6.1); the connection closes unread.
TEST_F(HttpServerTest, UnknownTransferCodingIs501AndClosesTheConnection) {
  for (const char* te :
       {"Transfer-Encoding: gzip, chunked\r\n", "Transfer-Encoding: GZIP ,Chunked\r\n",
        "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"}) {
    Client c(server_->bound_port());
    c.Send(std::string("POST /v1/events HTTP/1.1\r\nHost: test\r\n") + te +
           "\r\n2\r\n[]\r\n0\r\n\r\n" + kGet7);
    HttpResponse r = c.Read();
    EXPECT_TRUE(IsError(r, 501, "not_implemented")) << te << r.head << r.body;
    EXPECT_EQ(r.Header("Connection"), "close") << te;
    EXPECT_TRUE(c.ClosedByPeer()) << te;
  }
  for (const char* te : {"chunked, chunked", "chunked, gzip", "gzip", ","}) {
    Client c(server_->bound_port());
    c.Send(std::string("POST /v1/events HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: ") + te +
           "\r\n\r\n0\r\n\r\n");
    HttpResponse r = c.Read();
    // Answered 400, or closed unanswered where http_parser fails first.
    EXPECT_TRUE(r.status == 0 || IsError(r, 400, "bad_request")) << te << r.head << r.body;
    EXPECT_TRUE(c.ClosedByPeer()) << te;
  }
}

TEST_F(HttpServerTest, ChunkedAloneIsStillRead) {
  Client c(server_->bound_port());
  c.Send(
      "POST /v1/posts/7/counts HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
      "2\r\n{}\r\n0\r\n\r\n");
  EXPECT_EQ(c.Read().status, 405);  // the body was read: the connection goes on
  EXPECT_EQ(c.Get("/v1/posts/7/counts").body, kPost7);
}

// A header line that starts with a space or tab (obs-fold, RFC 9112
// section 5.2) is refused, however the bytes arrive.
TEST_F(HttpServerTest, ObsFoldedHeaderLineIs400) {
  const std::string folded[] = {
      "GET /v1/posts/7/counts HTTP/1.1\r\nHost: test\r\nX-A: a\r\n b\r\n\r\n",
      "GET /v1/posts/7/counts HTTP/1.1\r\nX-A:\r\n\tb\r\nHost: test\r\n\r\n",
      "GET /v1/posts/7/counts HTTP/1.1\nHost: test\nX-A: a\n b\n\n",
  };
  for (const std::string& request : folded) {
    for (bool byte_by_byte : {false, true}) {
      Client c(server_->bound_port());
      if (byte_by_byte) {
        for (char ch : request) c.Send(std::string(1, ch));
      } else {
        c.Send(request);
      }
      HttpResponse r = c.Read();
      EXPECT_TRUE(IsError(r, 400, "bad_request")) << request << r.head << r.body;
      EXPECT_TRUE(c.ClosedByPeer());
    }
  }
  // Spaces inside values and bodies, and blank lines before the request,
  // are no folding.
  Client c(server_->bound_port());
  c.Send("\r\nGET /v1/posts/7/counts HTTP/1.1\r\nHost: test\r\nX-A: a  b \r\n\r\n");
  EXPECT_EQ(c.Read().body, kPost7);
  c.Send("POST /v1/posts/7/counts HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\n[\n ]\n");
  EXPECT_EQ(c.Read().status, 405);
  EXPECT_EQ(c.Get("/v1/posts/7/counts").body, kPost7);
}

// A client that asks leave to send its body (curl does, for large ones)
// gets it before it sends, rather than after its own timeout.
TEST_F(HttpServerTest, ExpectContinueIsAnsweredBeforeTheBody) {
  Client c(server_->bound_port());
  c.Send(
      "POST /v1/events HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: "
      "2\r\n\r\n");
  HttpResponse interim = c.Read();
  EXPECT_EQ(interim.status, 100) << interim.head;
  c.Send("[]");
  HttpResponse r = c.Read();
  EXPECT_NE(r.status, 100);
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(c.Get("/v1/posts/7/counts").body, kPost7);
}

// When the headers already decide the answer, it goes instead of 100
// Continue, and the body is never read (RFC 9110 section 10.1.1).
TEST_F(HttpServerTest, ExpectContinueRefusedByTheHeadersGetsTheFinalAnswer) {
  QueryServiceOptions o;
  o.store = store_.get();
  o.auth_token = "t0ken";
  server_.reset();
  service_ = std::make_unique<QueryService>(std::move(o));
  Restart(ServerOptions{});
  const std::pair<std::string, std::string> cases[] = {
      {"Content-Length: 10\r\n", "unauthorized"},
      {"Authorization: Bearer nope\r\nContent-Length: 10\r\n", "unauthorized"},
      {"Authorization: Bearer t0ken\r\nContent-Length: 2097152\r\n", "payload_too_large"},
      {"Authorization: Bearer t0ken\r\nContent-Length: 104857600\r\n", "payload_too_large"},
  };
  for (const auto& [headers, code] : cases) {
    Client c(server_->bound_port());
    c.Send("POST /v1/events HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\n" + headers + "\r\n");
    HttpResponse r = c.Read();
    EXPECT_TRUE(IsError(r, code == "unauthorized" ? 401 : 413, code)) << headers << r.head;
    EXPECT_EQ(r.Header("Connection"), "close");
    EXPECT_TRUE(c.ClosedByPeer());
  }
  Client c(server_->bound_port());
  c.Send(
      "POST /v1/nowhere HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: "
      "2\r\n\r\n");
  EXPECT_TRUE(IsError(c.Read(), 404, "not_found"));
  // Headers that pass: 100 Continue as before.
  Client ok(server_->bound_port());
  ok.Send(
      "POST /v1/events HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\n"
      "Authorization: Bearer t0ken\r\nContent-Length: 2\r\n\r\n");
  EXPECT_EQ(ok.Read().status, 100);
}

// An Upgrade is not taken: the request is answered as HTTP/1.1 on a
// connection that stays open, so a request pipelined after it is answered
// too rather than read and dropped.
TEST_F(HttpServerTest, UpgradeIsIgnoredAndTheNextRequestAnswered) {
  for (const char* upgrade :
       {"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n",
        "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: "
        "AAMAAABkAAQAAP__\r\n"}) {
    Client c(server_->bound_port());
    c.Send(std::string("GET /v1/posts/7/counts HTTP/1.1\r\nHost: test\r\n") + upgrade + "\r\n" +
           kGet7);
    HttpResponse first = c.Read();
    EXPECT_EQ(first.body, kPost7) << upgrade;
    EXPECT_EQ(first.Header("Connection"), "keep-alive") << upgrade;
    EXPECT_EQ(c.Read().body, kPost7) << upgrade;
    EXPECT_EQ(c.Get("/v1/posts/7/counts").body, kPost7) << upgrade;
  }
}

}  // namespace
}  // namespace tally::query
