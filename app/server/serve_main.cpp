#include "app/server/serve_main.h"

#include <pthread.h>

#include <csignal>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/core/engine_client.h"

namespace cypris {

int serve_forever(const EngineConfig& cfg,
                  std::function<std::shared_ptr<EngineClient>(const EngineConfig&)> make_engine) {
  // Block the signals before any thread exists, so they are delivered only to sigwait below
  // instead of interrupting some engine or HTTP thread.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that disconnects must not kill the server

  try {
    std::shared_ptr<EngineClient> engine;
    if (!cfg.model.model.empty()) engine = make_engine(cfg);
    Server server(cfg, make_engine, std::move(engine));
    server.start();
    // No stats logger here: each engine logs its own stats line (AsyncEngine), so a second one
    // here printed every line twice.
    int sig = 0;
    sigwait(&set, &sig);
    LOG_INFO("received {}, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
    return 0;
  } catch (const cypris::Error& e) {
    LOG_ERROR("{}", e.what());
    return 1;
  } catch (const std::exception& e) {
    LOG_ERROR("server failed: {}", e.what());
    return 1;
  }
}

}  // namespace cypris
