// AsyncEngine: runs an Engine on its own thread and implements EngineClient for the front ends.
// HTTP and UI threads only submit, abort and read snapshots; the engine thread owns the Engine.
#pragma once

#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <variant>

#include "engine/config/engine_config.h"
#include "engine/core/engine.h"
#include "engine/core/engine_client.h"

namespace cypris {

class AsyncEngine : public EngineClient {
 public:
  // Loads the model on the calling thread (throws Error on bad input), then starts the engine
  // thread and, unless --disable-log-stats, the periodic stats line.
  explicit AsyncEngine(const EngineConfig& cfg);
  // Stops the engine thread; requests still running end with an error output.
  ~AsyncEngine() override;

  std::shared_ptr<RequestStream> submit(GenerateRequest req) override;
  void abort(const std::string& request_id) override;
  EngineStats stats() const override;
  ModelInfo model_info() const override { return info_; }
  const Tokenizer* tokenizer() const override { return engine_->tokenizer(); }

 private:
  struct Submit {
    GenerateRequest req;
    std::shared_ptr<RequestStream> stream;
    std::promise<void> accepted;
  };
  struct Abort {
    std::string request_id;
  };
  using Command = std::variant<Submit, Abort>;

  void loop();

  std::unique_ptr<Engine> engine_;
  ModelInfo info_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Command> commands_;
  bool stop_ = false;
  EngineStats snapshot_;
  std::unique_ptr<StatsLogger> stats_logger_;
  std::thread thread_;
};

}  // namespace cypris
