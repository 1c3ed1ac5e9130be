// The HTTP server: listens on --host/--port (TLS with --ssl-keyfile/--ssl-certfile), answers CORS
// preflights, checks API keys, serves the OpenAI routes (openai/) and, with --launch-kobold-api,
// the KoboldAI routes (kobold/). Routes are served both at their path and under --root-path.
// The engine is held through a factory so /v1/model/load and /v1/model/unload can swap it.
// httplib stays inside server.cpp (pimpl): it is heavy to compile.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/config/engine_config.h"

namespace cypris {

class EngineClient;

using EngineFactory = std::function<std::shared_ptr<EngineClient>(const EngineConfig&)>;

class Server {
 public:
  // engine: the model already loaded (nullptr: none yet; /v1/model/load builds one with factory).
  Server(EngineConfig cfg, EngineFactory factory, std::shared_ptr<EngineClient> engine);
  ~Server();  // stop()s
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds cfg.server.host:port (port 0 = an ephemeral port) and serves on background threads.
  // Returns the bound port. Throws cypris::Error when the address cannot be bound or the TLS
  // certificate or key cannot be read.
  int start();
  // Cancels running streams and stops listening; returns when the server threads are gone.
  // Idempotent.
  void stop();

  std::shared_ptr<EngineClient> engine() const;
  // Called once per finished HTTP request with "METHOD /path STATUS" (from server threads; set it
  // before start()). The desktop app's request log.
  void set_access_log(std::function<void(const std::string&)> log);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cypris
