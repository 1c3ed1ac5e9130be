// serve_forever in a child process: it serves until SIGTERM, then exits 0; a port it cannot bind
// is exit code 1.
#include "app/server/serve_main.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <thread>

#include "tests/integration/server/server_fixture.h"

using namespace cypris;

namespace {
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

pid_t spawn_server(int port) {
  pid_t pid = ::fork();
  if (pid == 0) {
    EngineConfig cfg;
    cfg.model.model = "fake/model";
    cfg.server.host = "127.0.0.1";
    cfg.server.port = port;
    cfg.logging.disable_log_stats = true;
    int code = serve_forever(cfg, [](const EngineConfig&) { return std::make_shared<fake::FakeEngine>(); });
    ::_exit(code);
  }
  return pid;
}

// Waits for the child to exit; -1 when it did not within the timeout.
int wait_exit(pid_t pid, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}
}  // namespace

TEST(ServeForever, ServesUntilSigtermThenExitsZero) {
  const int port = free_port();
  pid_t pid = spawn_server(port);
  ASSERT_GT(pid, 0);
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  bool up = false;
  for (int i = 0; i < 500 && !up; ++i) {
    auto r = c.Post("/v1/completions", R"({"prompt":"a","max_tokens":2})", "application/json");
    up = r && r->status == 200;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(up);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(20)), 0);
}

TEST(ServeForever, PortInUseIsExitCodeOne) {
  test::TestServer busy;  // holds a port
  pid_t pid = spawn_server(busy.port);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(20)), 1);
}
