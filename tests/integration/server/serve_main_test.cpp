// serve_forever in a child process: it serves until SIGTERM, then exits 0; a port it cannot bind
// is exit code 1.
#include "app/server/serve_main.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <future>
#include <mutex>
#include <thread>

#include "tests/integration/server/server_fixture.h"
#include "tests/support/fake_tokenizer.h"

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

// An engine that has stopped answering: each request gets one token, then nothing, and aborts
// are ignored (its streams never end).
class StuckEngine : public EngineClient {
 public:
  std::shared_ptr<RequestStream> submit(GenerateRequest req) override {
    auto s = std::make_shared<RequestStream>(req.request_id);
    RequestOutput out;
    out.request_id = req.request_id;
    out.outputs.push_back(CompletionDelta{});
    out.outputs.back().text = " stuck";
    out.outputs.back().token_ids = {7};
    s->push(std::move(out));
    std::lock_guard<std::mutex> lock(mu_);
    streams_.push_back(s);
    return s;
  }
  void abort(const std::string&) override {}
  EngineStats stats() const override { return {}; }
  ModelInfo model_info() const override {
    ModelInfo m;
    m.model = "stuck";
    m.max_model_len = 512;
    m.vocab_size = fake::FakeTokenizer::kVocabSize;
    return m;
  }
  const Tokenizer* tokenizer() const override { return &tok_; }

 private:
  fake::FakeTokenizer tok_;
  std::mutex mu_;
  std::vector<std::shared_ptr<RequestStream>> streams_;
};

pid_t spawn_server(int port, bool stuck = false, int64_t token_delay_ms = 0) {
  pid_t pid = ::fork();
  if (pid == 0) {
    EngineConfig cfg;
    cfg.model.model = "fake/model";
    cfg.server.host = "127.0.0.1";
    cfg.server.port = port;
    cfg.logging.disable_log_stats = true;
    cfg.logging.disable_log_requests = true;
    int code = serve_forever(cfg, [stuck, token_delay_ms](const EngineConfig&) -> std::shared_ptr<EngineClient> {
      if (stuck) return std::make_shared<StuckEngine>();
      fake::FakeEngineOptions o;
      if (token_delay_ms > 0) o.token_delay = std::chrono::milliseconds(token_delay_ms);
      return std::make_shared<fake::FakeEngine>(o);
    });
    ::_exit(code);
  }
  return pid;
}

// Polls until the server answers; false when it never did.
bool wait_up(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  for (int i = 0; i < 500; ++i) {
    auto r = c.Get("/version");
    if (r && r->status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
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
// Streams a completion in the background: `first` is set once the received text holds `marker` (any
// text when empty) or the request ends; the future holds everything received.
std::future<std::string> stream_in_background(int port, std::string body, std::string marker,
                                               std::promise<void>& first) {
  return std::async(std::launch::async, [port, body = std::move(body), marker = std::move(marker), &first] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    std::string raw;
    bool told = false;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.set_header("Content-Type", "application/json");
    req.body = body;
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      raw.append(data, len);
      if (!told && (marker.empty() || raw.find(marker) != std::string::npos)) {
        told = true;
        first.set_value();
      }
      return true;
    };
    c.send(req);
    if (!told) first.set_value();
    return raw;
  });
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

// issue #26 item 2: SIGTERM closed the listener but the process ran on for over 90 s while a list
// of prompts was in flight. In-flight requests are answered 503 and the process ends in seconds.
TEST(ServeForever, SigtermWithManyPromptsInFlightEndsInSecondsWith503) {
  const int port = free_port();
  pid_t pid = spawn_server(port, false, /*token_delay_ms=*/10);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_up(port));
  nlohmann::json prompts = nlohmann::json::array();
  for (int i = 0; i < 200; ++i) prompts.push_back("p" + std::to_string(i));
  const std::string body = nlohmann::json{{"prompt", prompts}, {"max_tokens", 400}}.dump();
  auto plain = std::async(std::launch::async, [&] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    auto r = c.Post("/v1/completions", body, "application/json");
    return r ? r->status : 0;
  });
  // The plain request is in flight once the engine runs its 200 prompts.
  httplib::Client probe("127.0.0.1", port);
  bool running = false;
  for (int i = 0; i < 1000 && !running; ++i) {
    auto m = probe.Get("/metrics");
    running = m && m->body.find("aphrodite:num_requests_running{model_name=\"fake-model\"} 200") != std::string::npos;
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(running);
  std::promise<void> first_event;
  nlohmann::json streamed = nlohmann::json::parse(body);
  streamed["stream"] = true;
  auto streaming = stream_in_background(port, streamed.dump(), "", first_event);
  ASSERT_EQ(first_event.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(8)), 0);
  EXPECT_EQ(plain.get(), 503);
  const std::string raw = streaming.get();
  EXPECT_NE(raw.find("shutting down"), std::string::npos) << raw.substr(raw.size() > 400 ? raw.size() - 400 : 0);
}

// An engine that stopped answering cannot hold the shutdown: the request is given up after a
// grace period and answered 503, and the process exits cleanly.
TEST(ServeForever, SigtermEndsEvenWhenTheEngineNoLongerAnswers) {
  const int port = free_port();
  pid_t pid = spawn_server(port, /*stuck=*/true);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_up(port));
  std::promise<void> first_event;
  auto streaming =
      stream_in_background(port, R"({"prompt":["a","b","c"],"max_tokens":100,"stream":true})", "stuck", first_event);
  ASSERT_EQ(first_event.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(8)), 0);
  const std::string raw = streaming.get();
  EXPECT_NE(raw.find("\"code\":503"), std::string::npos) << raw;
}
