// The guard's request-head screen: what is answered at once, without reading a body.
#include "app/server/connection_guard.h"

#include <gtest/gtest.h>

namespace cypris::server {
namespace {

int screen(const std::string& head, std::string* why = nullptr) {
  std::string w;
  const int s = screen_request_head(head, size_t{32} << 20, w);
  if (why) *why = w;
  return s;
}

TEST(ConnectionGuard, ContentLengthsThatCannotBeRightAreAnsweredAtOnce) {
  const std::string post = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
  std::string why;
  EXPECT_EQ(screen(post + "Content-Length: 12"), 0);
  EXPECT_EQ(screen(post + "content-length:   33554432  "), 0);  // exactly the limit
  EXPECT_EQ(screen(post + "Content-Length: 33554433", &why), 413);
  EXPECT_NE(why.find("--max-request-body-mb"), std::string::npos) << why;
  EXPECT_EQ(screen(post + "Content-Length: 18446744073709551616"), 413);  // 2^64
  EXPECT_EQ(screen(post + "Content-Length: 000000000000000000000000000012"), 0);
  EXPECT_EQ(screen(post + "Content-Length: -1", &why), 400);
  EXPECT_NE(why.find("Content-Length"), std::string::npos) << why;
  EXPECT_EQ(screen(post + "Content-Length: +5"), 400);
  EXPECT_EQ(screen(post + "Content-Length: "), 400);
  EXPECT_EQ(screen(post + "Content-Length: 5\r\nContent-Length: 6"), 400);
}

TEST(ConnectionGuard, MethodsWithoutRoutesAre405AndGarbageIs400) {
  EXPECT_EQ(screen("TRACE / HTTP/1.1"), 405);
  EXPECT_EQ(screen("CONNECT x:443 HTTP/1.1"), 405);
  EXPECT_EQ(screen("GET / HTTP/1.1"), 0);
  EXPECT_EQ(screen("OPTIONS /v1/models HTTP/1.1"), 0);
  EXPECT_EQ(screen("\x16\x03\x01 hello"), 400);  // a TLS hello on the plain port
  EXPECT_EQ(screen("NOSPACE"), 400);
}

TEST(ConnectionGuard, BodylessRequestsAreFramedWithZeroLength) {
  EXPECT_FALSE(head_frames_body("POST /v1/model/unload HTTP/1.1\r\nHost: x"));
  EXPECT_TRUE(head_frames_body("POST / HTTP/1.1\r\nContent-Length: 0"));
  EXPECT_TRUE(head_frames_body("POST / HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked"));
}

}  // namespace
}  // namespace cypris::server
