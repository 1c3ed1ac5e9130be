// The Server panel's controller: switch the local OpenAI/Kobold API on and off over the loaded
// engine (on a worker: binding can block), its error, the address to paste into SillyTavern, and a
// bounded log of recent requests.
#pragma once

#include <deque>
#include <memory>
#include <string>

#include "app/ui/state/background_jobs.h"
#include "app/ui/state/services.h"
#include "app/ui/state/ui_queue.h"

namespace cypris {

class EngineClient;

struct ServerSwitch {
  std::string host = "localhost";
  int64_t port = 2242;
  std::string api_key;  // empty: no key
  bool kobold = true;
};

// "http://localhost:2242/v1" (OpenAI-compatible base URL SillyTavern asks for). 0.0.0.0 and ::
// listen everywhere, so the address to paste is the loopback one.
std::string openai_base_url(const ServerSwitch& s);
std::string kobold_base_url(const ServerSwitch& s);  // "http://localhost:2242" (Kobold API)
// Checks host and port; returns the problem ("" when fine).
std::string check_server_switch(const ServerSwitch& s);

class ServerSession {
 public:
  enum class Status { Off, Starting, On, Stopping };
  ServerSession(AppServices& services, UiQueue& queue, BackgroundJobs& jobs);

  // cfg: the loaded engine's options; the switch's host/port/key/kobold override cfg.server.
  void start(const EngineConfig& cfg, const ServerSwitch& sw, const std::shared_ptr<EngineClient>& engine);
  void stop();
  Status status() const { return status_; }
  const std::string& error() const { return error_; }
  const ServerSwitch& active() const { return active_; }
  // Moves new request lines from the services into the log (once per frame).
  void poll();
  const std::deque<std::string>& log() const { return log_; }
  void clear_log() { log_.clear(); }

 private:
  AppServices& services_;
  UiQueue& queue_;
  BackgroundJobs& jobs_;
  Status status_ = Status::Off;
  std::string error_;
  ServerSwitch active_;
  std::deque<std::string> log_;
  static constexpr size_t kMaxLog = 1000;
};

}  // namespace cypris
