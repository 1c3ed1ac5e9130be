// Slow and hostile clients on loopback (issue #20 items 2, 3, 10): a request head that trickles in
// gets 408 at its deadline, a slowloris crowd from one address neither starves /health for others
// nor keeps the server from stopping, connections over the caps are answered 503 at once, and
// heads with impossible Content-Lengths or methods without routes are answered without waiting for
// a body. Every loop here is bounded, and every socket has a receive timeout.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "tests/integration/server/server_fixture.h"

using namespace cypris;
using namespace cypris::test;

namespace {

// A raw TCP client: connects from `from` (another loopback address when given) with a receive
// timeout, so no test waits longer than that on a silent server.
class RawClient {
 public:
  RawClient(int port, const char* from = nullptr, int recv_timeout_ms = 5000) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{recv_timeout_ms / 1000, (recv_timeout_ms % 1000) * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (from) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      ::inet_pton(AF_INET, from, &local.sin_addr);
      ::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local));
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  bool send(const std::string& s) { return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == ssize_t(s.size()); }
  // Whether the server has said something (or closed) already.
  bool answered() {
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n >= 0;
  }
  // Everything until the server closes the connection or the receive timeout passes.
  std::string read_all() {
    std::string out;
    char buf[4096];
    while (true) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return 0;
  return std::stoi(response.substr(9, 3));
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

TEST(HostileClients, TricklingHeadGets408AtItsDeadline) {
  TestServer s([](EngineConfig& c) { c.server.request_head_timeout = 0.5; });
  RawClient c(s.port);
  ASSERT_TRUE(c.connected());
  const auto start = Clock::now();
  // One byte every 50 ms would take 1.5 s for this head; the deadline is 0.5 s.
  const std::string head = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  for (char ch : head) {
    if (c.answered() || !c.send(std::string(1, ch))) break;  // the server already gave up on us
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (seconds_since(start) > 3) break;
  }
  const std::string r = c.read_all();
  EXPECT_EQ(status_of(r), 408) << r;
  EXPECT_NE(r.find("--request-head-timeout"), std::string::npos) << r;
}

TEST(HostileClients, SlowlorisFromOneAddressLeavesHealthAnsweringAndIsCapped) {
  TestServer s([](EngineConfig& c) {
    c.server.max_connections = 16;
    c.server.max_connections_per_client = 8;
    c.server.request_head_timeout = 30;  // the crowd must not simply time out during the test
  });
  // Eight slow clients from 127.0.0.2 fill that address's share; they never finish their heads.
  std::vector<std::unique_ptr<RawClient>> crowd;
  for (int i = 0; i < 8; ++i) {
    crowd.push_back(std::make_unique<RawClient>(s.port, "127.0.0.2", 3000));
    ASSERT_TRUE(crowd.back()->connected());
    crowd.back()->send("GET /health HTTP/1.1\r\nX-a: ");
  }
  // Wait (bounded) until the server holds all eight.
  for (int i = 0; i < 100; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // A ninth from the same address is turned away at once, with a reason.
  RawClient ninth(s.port, "127.0.0.2", 3000);
  ASSERT_TRUE(ninth.connected());
  const std::string r9 = ninth.read_all();
  EXPECT_EQ(status_of(r9), 503) << r9;
  EXPECT_NE(r9.find("--max-connections-per-client"), std::string::npos) << r9;
  // Everyone else is still served.
  auto h = get(s, "/health");
  EXPECT_EQ(h.status, 200);
  // And stopping the server does not wait for the crowd's heads.
  const auto start = Clock::now();
  s.server->stop();
  EXPECT_LT(seconds_since(start), 5.0);
}

// issue #20 item 3: SIGTERM (Server::stop) while clients trickle header bytes finished only when
// they stopped; it must finish within a few seconds whatever they do.
TEST(HostileClients, StopIsPromptWhileClientsTrickleHeaders) {
  TestServer s([](EngineConfig& c) { c.server.request_head_timeout = 60; });
  std::vector<std::unique_ptr<RawClient>> trickle;
  for (int i = 0; i < 4; ++i) {
    trickle.push_back(std::make_unique<RawClient>(s.port, nullptr, 1000));
    trickle.back()->send("GET /health HTTP/1.1\r\n");
  }
  std::atomic<bool> done{false};
  std::thread feeder([&] {
    for (int k = 0; k < 200 && !done; ++k) {  // at most 10 s of trickling
      for (auto& c : trickle) c->send("X");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto stopped = std::async(std::launch::async, [&] { s.server->stop(); });
  const bool in_time = stopped.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  done = true;
  feeder.join();
  stopped.wait();
  EXPECT_TRUE(in_time) << "Server::stop() waited for the trickling clients";
}

// issue #20 item 10: impossible Content-Lengths were answered only after the 30 s read timeout.
TEST(HostileClients, BadContentLengthsAreAnsweredAtOnce) {
  TestServer s;
  struct Case {
    const char* length;
    int status;
  } cases[] = {{"-1", 400}, {"18446744073709551616", 413}, {"99999999999", 413}, {"12abc", 400}};
  for (const auto& c : cases) {
    RawClient raw(s.port, nullptr, 3000);
    const auto start = Clock::now();
    raw.send(std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Content-Length: ") +
             c.length + "\r\n\r\n{\"prompt\":\"a\"}");
    const std::string r = raw.read_all();
    EXPECT_EQ(status_of(r), c.status) << c.length << ": " << r;
    EXPECT_NE(r.find("Content-Length"), std::string::npos) << r;
    EXPECT_LT(seconds_since(start), 2.5) << c.length;  // the read timeout would be 30 s
  }
}

TEST(HostileClients, TraceAndUnknownMethodsAre405) {
  TestServer s;
  for (const char* m : {"TRACE", "CONNECT", "PROPFIND"}) {
    RawClient raw(s.port, nullptr, 3000);
    raw.send(std::string(m) + " /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string r = raw.read_all();
    EXPECT_EQ(status_of(r), 405) << m << ": " << r;
    EXPECT_NE(r.find("Allow: "), std::string::npos) << r;
  }
}

// The README documents `POST /v1/model/unload` without a body; httplib waited for one.
TEST(HostileClients, PostWithoutBodyOrLengthIsServed) {
  TestServer s([](EngineConfig& c) { c.server.admin_key = "adm"; });
  RawClient raw(s.port, nullptr, 3000);
  raw.send("POST /v1/model/unload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer adm\r\nConnection: close\r\n\r\n");
  const std::string r = raw.read_all();
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(s.server->engine(), nullptr);
}

TEST(HostileClients, PipelinedRequestsOnOneConnectionAreBothAnswered) {
  TestServer s;
  RawClient raw(s.port, nullptr, 3000);
  raw.send(
      "GET /version HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /v1/tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 16\r\n"
      "Connection: close\r\n\r\n{\"prompt\":\"a b\"}");
  const std::string r = raw.read_all();
  EXPECT_EQ(status_of(r), 200) << r;
  const size_t second = r.find("HTTP/1.1 ", 9);
  ASSERT_NE(second, std::string::npos) << r;
  EXPECT_EQ(status_of(r.substr(second)), 200) << r;
  EXPECT_NE(r.find("\"count\":3"), std::string::npos) << r;  // BOS + 2 words
}
