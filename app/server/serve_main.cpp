#include "app/server/serve_main.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include "engine/common/error.h"
#include "engine/common/heap.h"
#include "engine/common/log.h"
#include "engine/common/stop_signal.h"
#include "engine/core/engine_client.h"

namespace cypris {

namespace {

// The shutdown ends in-flight requests within kShutdownDrainGrace; should something still hold it
// (a model load, an engine that no longer answers), the process exits anyway after this long, or
// at once on a second SIGINT/SIGTERM.
constexpr int kShutdownDeadlineSeconds = 10;

// From the first signal until serve_forever returns: exits the process when the shutdown takes
// too long or a second signal comes; stands down (joined) when the shutdown finished.
class ShutdownWatchdog {
 public:
  explicit ShutdownWatchdog(sigset_t set) : thread_([this, set] { watch(set); }) {}
  ~ShutdownWatchdog() {
    done_ = true;
    thread_.join();
  }
  ShutdownWatchdog(const ShutdownWatchdog&) = delete;
  ShutdownWatchdog& operator=(const ShutdownWatchdog&) = delete;

 private:
  void watch(sigset_t set) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kShutdownDeadlineSeconds);
    while (!done_) {
      if (std::chrono::steady_clock::now() >= deadline) {
        LOG_ERROR("the shutdown did not finish within {} s: exiting now", kShutdownDeadlineSeconds);
        break;
      }
      timespec slice{0, 100 * 1000 * 1000};  // done_ is looked at every 100 ms
      const int sig = sigtimedwait(&set, nullptr, &slice);
      if (sig > 0) {
        LOG_ERROR("received a second {}: exiting now", sig == SIGINT ? "SIGINT" : "SIGTERM");
        break;
      }
    }
    if (done_) return;
    std::fflush(nullptr);
    std::_Exit(1);
  }

  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace

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
  // Before the engine's and the server's threads exist.
  limit_malloc_arenas(kServerMallocArenas);

  try {
    std::optional<ShutdownWatchdog> watchdog;  // first declared, last gone: it covers the engine's end too
    std::shared_ptr<EngineClient> engine;
    if (!cfg.model.model.empty()) engine = make_engine(cfg);
    Server server(cfg, make_engine, std::move(engine));
    server.start();
    // No stats logger here: each engine logs its own stats line (AsyncEngine), so a second one
    // here printed every line twice.
    int sig = 0;
    sigwait(&set, &sig);
    note_stop_signal(sig);  // a wait on other MPI processes gives up now (stop_signal.h)
    LOG_INFO("received {}, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    watchdog.emplace(set);
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
