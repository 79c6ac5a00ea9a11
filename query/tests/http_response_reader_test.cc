#include "http_response_reader.h"

#include <gtest/gtest.h>

#include <string>

namespace tally::query::internal {
namespace {

using State = HttpResponseReader::State;

// Feeds `bytes` the way a connection does, `piece` bytes per read: what
// the reader did not consume stays at the front of the buffer.
// *leftover: bytes after the answer.
State FeedInPieces(HttpResponseReader* reader, std::string_view bytes, size_t piece,
                   std::string* leftover = nullptr) {
  std::string buffer;
  State state = State::kNeedMore;
  for (size_t i = 0; i < bytes.size() && state == State::kNeedMore; i += piece) {
    buffer.append(bytes.substr(i, piece));
    size_t used = 0;
    state = reader->Feed(buffer, &used);
    EXPECT_LE(used, buffer.size());
    buffer.erase(0, used);
    if (state == State::kDone && leftover) {
      *leftover = buffer + std::string(bytes.substr(std::min(bytes.size(), i + piece)));
    }
  }
  return state;
}

constexpr char kAnswer[] =
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: application/json\r\n"
    "X-Tally-Member: m1\r\n"
    "Content-Length: 11\r\n"
    "\r\n"
    "{\"ok\":true}";

TEST(HttpResponseReaderTest, ReadsAnAnswerWhateverTheReadSizes) {
  for (size_t piece : {size_t{1}, size_t{2}, size_t{7}, size_t{64}, size_t{4096}}) {
    HttpResponseReader reader(1 << 20, 8 << 10);
    PeerResponse r;
    r.body = "stale";
    reader.Start(&r);
    EXPECT_FALSE(reader.got_some());
    ASSERT_EQ(FeedInPieces(&reader, kAnswer, piece), State::kDone) << piece;
    EXPECT_TRUE(reader.got_some());
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, R"({"ok":true})");
    EXPECT_EQ(r.Header("content-type"), "application/json");
    EXPECT_EQ(r.Header("X-TALLY-MEMBER"), "m1");
    EXPECT_EQ(r.Header("Retry-After"), "");
    EXPECT_TRUE(reader.keep_alive());
  }
}

TEST(HttpResponseReaderTest, LeavesTheBytesAfterTheAnswer) {
  HttpResponseReader reader(1 << 20, 8 << 10);
  PeerResponse r;
  reader.Start(&r);
  std::string leftover;
  std::string two = std::string(kAnswer) + "HTTP/1.1 204 No Content\r\n\r\n";
  ASSERT_EQ(FeedInPieces(&reader, two, two.size(), &leftover), State::kDone);
  EXPECT_EQ(r.body, R"({"ok":true})");
  EXPECT_EQ(leftover, "HTTP/1.1 204 No Content\r\n\r\n");
  // The reader is reusable for the next answer.
  PeerResponse next;
  reader.Start(&next);
  ASSERT_EQ(FeedInPieces(&reader, leftover, 3), State::kDone);
  EXPECT_EQ(next.status, 204);
  EXPECT_EQ(next.body, "");
}

TEST(HttpResponseReaderTest, DecodesChunkedBodies) {
  HttpResponseReader reader(1 << 20, 8 << 10);
  PeerResponse r;
  reader.Start(&r);
  const std::string answer =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\n";
  for (size_t piece : {size_t{1}, size_t{5}, answer.size()}) {
    reader.Start(&r);
    ASSERT_EQ(FeedInPieces(&reader, answer, piece), State::kDone) << piece;
    EXPECT_EQ(r.body, "hello, world");
    EXPECT_TRUE(reader.keep_alive());
  }
}

TEST(HttpResponseReaderTest, ConnectionCloseAndHttp10AreNotKeptAlive) {
  HttpResponseReader reader(1 << 20, 8 << 10);
  PeerResponse r;
  reader.Start(&r);
  ASSERT_EQ(
      FeedInPieces(&reader, "HTTP/1.1 503 X\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 9),
      State::kDone);
  EXPECT_EQ(r.status, 503);
  EXPECT_FALSE(reader.keep_alive());
  reader.Start(&r);
  ASSERT_EQ(FeedInPieces(&reader, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 100),
            State::kDone);
  EXPECT_FALSE(reader.keep_alive());
}

TEST(HttpResponseReaderTest, ABodyWithoutLengthEndsWithTheConnection) {
  HttpResponseReader reader(1 << 20, 8 << 10);
  PeerResponse r;
  reader.Start(&r);
  EXPECT_EQ(FeedInPieces(&reader, "HTTP/1.1 200 OK\r\n\r\nuntil the end", 4), State::kNeedMore);
  EXPECT_EQ(reader.FeedEof(), State::kDone);
  EXPECT_EQ(r.body, "until the end");
  EXPECT_FALSE(reader.keep_alive());
}

TEST(HttpResponseReaderTest, AnAnswerCutShortIsAnError) {
  HttpResponseReader reader(1 << 20, 8 << 10);
  PeerResponse r;
  reader.Start(&r);
  EXPECT_EQ(reader.FeedEof(), State::kError);  // nothing at all
  reader.Start(&r);
  EXPECT_EQ(FeedInPieces(&reader, "HTTP/1.1 200 OK\r\nContent-Le", 100), State::kNeedMore);
  EXPECT_EQ(reader.FeedEof(), State::kError);
  reader.Start(&r);
  EXPECT_EQ(FeedInPieces(&reader, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 100),
            State::kNeedMore);
  EXPECT_EQ(reader.FeedEof(), State::kError);
  EXPECT_NE(reader.error(), "");
}

TEST(HttpResponseReaderTest, RejectsWhatIsNotHttpAndWhatIsTooLarge) {
  {
    HttpResponseReader reader(1 << 20, 8 << 10);
    PeerResponse r;
    reader.Start(&r);
    EXPECT_EQ(FeedInPieces(&reader, "SSH-2.0-OpenSSH_9.2\r\n\r\n", 100), State::kError);
    EXPECT_NE(reader.error(), "");
  }
  {
    HttpResponseReader reader(/*max_body_bytes=*/10, 8 << 10);
    PeerResponse r;
    reader.Start(&r);
    EXPECT_EQ(FeedInPieces(&reader, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", 100),
              State::kError);
    reader.Start(&r);
    EXPECT_EQ(FeedInPieces(&reader,
                           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                           "6\r\nhello \r\n6\r\nworld!\r\n0\r\n\r\n",
                           100),
              State::kError);
  }
  {
    HttpResponseReader reader(1 << 20, /*max_header_bytes=*/1024);
    PeerResponse r;
    reader.Start(&r);
    std::string big = "HTTP/1.1 200 OK\r\nX-Big: " + std::string(2000, 'x') + "\r\n\r\n";
    EXPECT_EQ(FeedInPieces(&reader, big, 100), State::kError);
  }
}

TEST(HttpResponseReaderTest, SkipsInterimAnswers) {
  HttpResponseReader reader(1 << 20, 8 << 10);
  PeerResponse r;
  reader.Start(&r);
  ASSERT_EQ(FeedInPieces(
                &reader,
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 6),
            State::kDone);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok");
  EXPECT_EQ(r.headers, "Content-Length: 2\r\n");
}

TEST(PeerResponseTest, HeaderLooksUpWholeNamesOnly) {
  PeerResponse r;
  r.headers = "Retry-After-X: 9\r\nRetry-After:  2 \r\nretry-after: 3\r\n";
  EXPECT_EQ(r.Header("Retry-After"), "2");
  EXPECT_EQ(r.Header("Retry"), "");
  EXPECT_EQ(r.Header(""), "");
}

}  // namespace
}  // namespace tally::query::internal
