// AsyncEngine: runs an Engine on its own thread and implements EngineClient for the front ends.
// HTTP and UI threads only submit, abort and read snapshots; the engine thread owns the Engine.
#pragma once

#include <atomic>
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
#include "engine/loader/lora_adapter.h"

namespace cypris {

class AsyncEngine : public EngineClient {
 public:
  // Loads the model on the calling thread (throws Error on bad input), then starts the engine
  // thread and, unless --disable-log-stats, the periodic stats line.
  explicit AsyncEngine(const EngineConfig& cfg);
  // Stops the engine thread; requests still running end with an error output.
  ~AsyncEngine() override;

  std::shared_ptr<RequestStream> submit(GenerateRequest req) override;
  std::vector<std::shared_ptr<RequestStream>> submit_all(std::vector<GenerateRequest> reqs) override;
  void abort(const std::string& request_id) override;
  EngineStats stats() const override;
  ModelInfo model_info() const override { return info_; }
  const Tokenizer* tokenizer() const override { return engine_->tokenizer(); }
  // The adapter is read and checked on the calling thread; the engine thread writes it into a slot
  // between two steps, so running requests go on while it loads.
  bool lora_enabled() const override { return engine_->lora_enabled(); }
  std::vector<LoraInfo> loras() const override;
  void load_lora(const std::string& name, const std::string& path) override;
  bool unload_lora(const std::string& name) override;
  // How many times the engine went idle and gave the heap's free memory back (release_free_heap).
  int64_t idle_trims() const { return idle_trims_.load(); }

 private:
  // One client request's prompts (one or more), added in one go: all or none.
  struct Submit {
    std::vector<GenerateRequest> reqs;
    std::vector<std::shared_ptr<RequestStream>> streams;
    std::promise<void> accepted;
  };
  struct Abort {
    std::string request_id;
  };
  struct LoraLoad {
    std::string name;
    std::shared_ptr<const LoraAdapter> adapter;
    std::promise<void> done;
  };
  struct LoraUnload {
    std::string name;
    std::promise<bool> done;
  };
  using Command = std::variant<Submit, Abort, LoraLoad, LoraUnload>;
  // Queues a command for the engine thread (Error once it is stopping).
  void post(Command c);

  void loop();
  // Adds every request of s to the engine, or none of them (rethrows the first refusal).
  void add_all(Submit& s);

  std::unique_ptr<Engine> engine_;
  ModelInfo info_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Command> commands_;
  bool stop_ = false;
  std::atomic<int64_t> idle_trims_{0};
  EngineStats snapshot_;
  std::vector<LoraInfo> loras_;  // the engine's adapters, updated by the engine thread
  std::unique_ptr<StatsLogger> stats_logger_;
  std::thread thread_;
};

}  // namespace cypris
