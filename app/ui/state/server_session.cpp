// ServerSession; see server_session.h.
#include "app/ui/state/server_session.h"

#include <fmt/format.h>

#include <exception>

namespace cypris {

namespace {

std::string url_host(const std::string& host) {
  if (host.empty() || host == "0.0.0.0" || host == "::") return "localhost";
  if (host.find(':') != std::string::npos) return "[" + host + "]";  // IPv6 literal
  return host;
}

}  // namespace

std::string openai_base_url(const ServerSwitch& s) {
  return fmt::format("http://{}:{}/v1", url_host(s.host), s.port);
}
std::string kobold_base_url(const ServerSwitch& s) {
  return fmt::format("http://{}:{}", url_host(s.host), s.port);
}

std::string check_server_switch(const ServerSwitch& s) {
  if (s.port < 1 || s.port > 65535) return fmt::format("port {} is not valid (1-65535)", s.port);
  if (s.host.find_first_of(" /\t") != std::string::npos) return fmt::format("host '{}' is not valid", s.host);
  return "";
}

ServerSession::ServerSession(AppServices& services, UiQueue& queue, BackgroundJobs& jobs)
    : services_(services), queue_(queue), jobs_(jobs) {}

void ServerSession::start(const EngineConfig& cfg, const ServerSwitch& sw,
                          const std::shared_ptr<EngineClient>& engine) {
  if (status_ == Status::Starting || status_ == Status::Stopping) return;
  error_.clear();
  if (!engine) {
    error_ = "load a model first: the API serves the loaded model";
    return;
  }
  if (std::string problem = check_server_switch(sw); !problem.empty()) {
    error_ = problem;
    return;
  }
  EngineConfig c = cfg;
  c.server.host = sw.host;
  c.server.port = sw.port;
  c.server.api_keys.clear();
  if (!sw.api_key.empty()) c.server.api_keys.push_back(sw.api_key);
  c.server.launch_kobold_api = sw.kobold;
  status_ = Status::Starting;
  active_ = sw;
  jobs_.run("server", [this, c, engine](const std::atomic<bool>&) {
    std::string err;
    try {
      if (services_.server_running()) services_.stop_server();
      services_.start_server(c, engine);
    } catch (const std::exception& e) {
      err = e.what();
    }
    queue_.post([this, err] {
      status_ = err.empty() ? Status::On : Status::Off;
      error_ = err;
    });
  });
}

void ServerSession::stop() {
  if (status_ != Status::On) return;
  status_ = Status::Stopping;
  jobs_.run("server", [this](const std::atomic<bool>&) {
    std::string err;
    try {
      services_.stop_server();
    } catch (const std::exception& e) {
      err = e.what();
    }
    queue_.post([this, err] {
      status_ = Status::Off;
      error_ = err;
    });
  });
}

void ServerSession::poll() {
  if (status_ == Status::Off) return;
  for (auto& line : services_.take_server_log()) {
    log_.push_back(std::move(line));
    while (log_.size() > kMaxLog) log_.pop_front();
  }
}

}  // namespace cypris
