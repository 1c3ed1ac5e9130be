// A Server on 127.0.0.1 with an ephemeral port, in front of the fake engine, plus small HTTP client
// helpers (JSON posts, SSE collection) for the integration tests.
#pragma once

#include <httplib.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/server/server.h"
#include "app/server/sse.h"
#include "engine/config/engine_config.h"
#include "tests/support/fake_engine.h"

namespace cypris::test {

struct TestServer {
  EngineConfig cfg;
  std::shared_ptr<fake::FakeEngine> engine;
  std::unique_ptr<Server> server;
  int port = 0;
  int factory_calls = 0;

  explicit TestServer(std::function<void(EngineConfig&)> edit = {}, fake::FakeEngineOptions opts = {}) {
    cfg.server.host = "127.0.0.1";
    cfg.server.port = 0;
    cfg.server.launch_kobold_api = true;
    cfg.model.model = "fake/model";
    cfg.logging.disable_log_requests = true;
    if (edit) edit(cfg);
    engine = std::make_shared<fake::FakeEngine>(opts);
    server = std::make_unique<Server>(
        cfg,
        [this, opts](const EngineConfig&) -> std::shared_ptr<EngineClient> {
          ++factory_calls;
          engine = std::make_shared<fake::FakeEngine>(opts);
          return engine;
        },
        engine);
    port = server->start();
  }
  ~TestServer() { server->stop(); }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(20, 0);
    c.set_connection_timeout(5, 0);
    return c;
  }
};

struct Reply {
  int status = 0;
  std::string body;
  nlohmann::json json;  // null when the body is not JSON
  httplib::Headers headers;
};

inline Reply to_reply(const httplib::Result& r) {
  Reply out;
  if (!r) return out;
  out.status = r->status;
  out.body = r->body;
  out.headers = r->headers;
  out.json = nlohmann::json::parse(r->body, nullptr, false);
  if (out.json.is_discarded()) out.json = nullptr;
  return out;
}

inline Reply post_json(const TestServer& s, const std::string& path, const std::string& body,
                       const httplib::Headers& headers = {}) {
  auto c = s.client();
  return to_reply(c.Post(path.c_str(), headers, body, "application/json"));
}

inline Reply get(const TestServer& s, const std::string& path, const httplib::Headers& headers = {}) {
  auto c = s.client();
  return to_reply(c.Get(path.c_str(), headers));
}

struct StreamReply {
  int status = 0;
  std::vector<server::SseEvent> events;
  std::string raw;
  std::string error;  // the client's error ("Success" when none)
};

// POSTs and collects the SSE events; stop_after > 0 closes the connection after that many events.
inline StreamReply post_stream(const TestServer& s, const std::string& path, const std::string& body,
                               size_t stop_after = 0, const httplib::Headers& headers = {}) {
  auto c = s.client();
  StreamReply out;
  server::SseParser parser;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = headers;
  req.set_header("Content-Type", "application/json");
  req.body = body;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    out.raw.append(data, len);
    for (auto& e : parser.feed(std::string_view(data, len))) out.events.push_back(std::move(e));
    return stop_after == 0 || out.events.size() < stop_after;
  };
  auto r = c.send(req);
  if (r) out.status = r->status;
  out.error = httplib::to_string(r.error());
  return out;
}

// The concatenated "text" of every completion chunk, per choice index.
inline std::vector<std::string> completion_texts(const StreamReply& r, size_t choices = 1) {
  std::vector<std::string> texts(choices);
  for (const auto& e : r.events) {
    if (e.data == "[DONE]") continue;
    auto j = nlohmann::json::parse(e.data, nullptr, false);
    if (j.is_discarded() || !j.contains("choices")) continue;
    for (const auto& c : j["choices"]) {
      size_t i = c["index"].get<size_t>();
      if (i >= texts.size()) texts.resize(i + 1);
      if (c.contains("text")) texts[i] += c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].contains("content")) texts[i] += c["delta"]["content"].get<std::string>();
    }
  }
  return texts;
}

}  // namespace cypris::test
