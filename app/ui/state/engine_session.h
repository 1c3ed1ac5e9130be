// The loaded model as the UI sees it: load (on a worker, with progress and cancel), unload, the
// error of a failed load, and periodic stats snapshots for the Stats panel. All state changes
// happen on the UI thread (results come back through the UiQueue).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "app/ui/state/background_jobs.h"
#include "app/ui/state/services.h"
#include "app/ui/state/stats_history.h"
#include "app/ui/state/ui_queue.h"
#include "engine/core/engine_client.h"

namespace cypris {

class EngineSession {
 public:
  enum class Status { Unloaded, Loading, Loaded, Failed };

  EngineSession(AppServices& services, UiQueue& queue, BackgroundJobs& jobs);

  Status status() const { return status_; }
  bool loaded() const { return status_ == Status::Loaded; }
  const std::string& error() const { return error_; }  // Failed: why
  const LoadProgress& progress() const { return progress_; }
  const std::shared_ptr<EngineClient>& engine() const { return engine_; }
  const ModelInfo& model_info() const { return info_; }
  const EngineConfig& loaded_config() const { return loaded_cfg_; }

  // Starts loading (ignored while loading). The current model is unloaded first.
  void load(const EngineConfig& cfg);
  void cancel_load();
  void unload();
  // Called after a successful load / before an unload (the app stops the server, saves settings).
  std::function<void(const EngineSession&)> on_loaded;
  std::function<void()> on_unloading;

  // Asks the engine for a stats snapshot every `interval_s` seconds (on a worker) and appends
  // it to history(). Call once per frame with a monotonic time.
  void poll_stats(double now_s, double interval_s = 0.5);
  const StatsHistory& history() const { return history_; }

 private:
  AppServices& services_;
  UiQueue& queue_;
  BackgroundJobs& jobs_;
  Status status_ = Status::Unloaded;
  std::string error_;
  LoadProgress progress_;
  std::shared_ptr<EngineClient> engine_;
  ModelInfo info_;
  EngineConfig loaded_cfg_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  uint64_t generation_ = 0;  // bumps on every load/unload so late results of an old load are dropped
  StatsHistory history_;
  double last_poll_s_ = -1e9;
  std::shared_ptr<std::atomic<bool>> poll_in_flight_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace cypris
