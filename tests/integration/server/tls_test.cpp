// TLS with --ssl-keyfile/--ssl-certfile, using a self-signed certificate made by the openssl CLI.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "app/server/server.h"
#include "engine/common/error.h"
#include "tests/integration/server/server_fixture.h"

using namespace cypris;
using namespace cypris::test;

namespace {
std::filesystem::path make_cert() {
  auto dir = std::filesystem::temp_directory_path() / ("cypris-tls-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -keyout '" +
                          (dir / "key.pem").string() + "' -out '" + (dir / "cert.pem").string() + "' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return {};
  return dir;
}
}  // namespace

TEST(Tls, ServesOverHttps) {
  auto dir = make_cert();
  if (dir.empty()) GTEST_SKIP() << "the openssl command is not available";
  TestServer s([&](EngineConfig& c) {
    c.server.ssl_keyfile = (dir / "key.pem").string();
    c.server.ssl_certfile = (dir / "cert.pem").string();
  });
  httplib::SSLClient c("127.0.0.1", s.port);
  c.set_ca_cert_path((dir / "cert.pem").string());
  c.enable_server_certificate_verification(false);  // CN-only certificate; the handshake is what matters
  c.set_read_timeout(10, 0);
  auto r = c.Post("/v1/completions", R"({"prompt":"a","max_tokens":2})", "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find(" t0 t1"), std::string::npos);
  // Plain HTTP to the TLS port gets no HTTP answer.
  httplib::Client plain("127.0.0.1", s.port);
  plain.set_read_timeout(2, 0);
  auto p = plain.Get("/health");
  EXPECT_TRUE(!p || p->status != 200);
  std::filesystem::remove_all(dir);
}

TEST(Tls, DisconnectBeforeTheFirstTokenAbortsTheRequest) {
  auto dir = make_cert();
  if (dir.empty()) GTEST_SKIP() << "the openssl command is not available";
  fake::FakeEngineOptions o;
  o.first_token_delay = std::chrono::seconds(30);
  TestServer s(
      [&](EngineConfig& c) {
        c.server.ssl_keyfile = (dir / "key.pem").string();
        c.server.ssl_certfile = (dir / "cert.pem").string();
      },
      o);
  {
    httplib::SSLClient c("127.0.0.1", s.port);
    c.enable_server_certificate_verification(false);
    c.set_read_timeout(0, 300000);  // gives up after 0.3 s
    auto r = c.Post("/v1/completions", R"({"prompt":"x","max_tokens":5,"stream":true})", "application/json");
    (void)r;
  }
  EXPECT_TRUE(s.engine->wait_for_abort("cmpl-", std::chrono::seconds(20)));
  std::filesystem::remove_all(dir);
}

TEST(Tls, UnreadableCertificateIsAnError) {
  EngineConfig cfg;
  cfg.server.host = "127.0.0.1";
  cfg.server.port = 0;
  cfg.server.ssl_keyfile = "/nonexistent/key.pem";
  cfg.server.ssl_certfile = "/nonexistent/cert.pem";
  Server s(cfg, nullptr, std::make_shared<fake::FakeEngine>());
  try {
    s.start();
    FAIL() << "start() accepted missing TLS files";
  } catch (const cypris::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/cert.pem"), std::string::npos);
  }
}
