// The Models panel's LoRA adapters: the adapters the loaded engine serves (name, path, rank), load
// one from a local PEFT folder and unload one, each on a worker through the engine's front door
// (EngineClient::load_lora / unload_lora). What the engine refuses (--enable-lora off, a malformed
// adapter, shapes that do not fit the model, no free --max-loras slot) comes back as error() text.
// A Hugging Face repo id ("org/name" or "org/name@revision" that is no local path) goes to the engine
// like a folder: it fetches the adapter's two files into the hub cache (hub::resolve_adapter_dir).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "app/ui/state/background_jobs.h"
#include "app/ui/state/ui_queue.h"
#include "engine/core/engine_client.h"

namespace cypris {

class LoraSession {
 public:
  LoraSession(UiQueue& queue, BackgroundJobs& jobs);

  // Reads the engine's adapters and whether it was started with --enable-lora (cheap: the
  // AsyncEngine keeps a copy); call every frame. A null engine clears the list.
  void refresh(const std::shared_ptr<EngineClient>& engine);
  const std::vector<LoraInfo>& adapters() const { return adapters_; }
  bool enabled() const { return enabled_; }
  bool busy() const { return busy_; }
  const std::string& error() const { return error_; }      // the last load/unload failure
  const std::string& message() const { return message_; }  // the last success ("loaded sql (rank 8)")

  // Starts loading the folder, .gguf file or hub repo at path under name (empty: the folder's or
  // repo's name). Returns false with error() when there is no engine, LoRA is off, a load is running
  // or the path is empty; the engine's own refusal arrives later in error().
  bool load(const std::shared_ptr<EngineClient>& engine, const std::string& name, const std::string& path);
  bool unload(const std::shared_ptr<EngineClient>& engine, const std::string& name);

  // The name an adapter at path gets when none is given: its folder's name.
  static std::string default_name(const std::string& path);
  // "owner/name" or "owner/name@revision" that is not an existing local path (named "name" by default).
  static bool looks_like_hub_repo(const std::string& path);

 private:
  UiQueue& queue_;
  BackgroundJobs& jobs_;
  std::vector<LoraInfo> adapters_;
  bool enabled_ = false;
  bool busy_ = false;
  std::string error_;
  std::string message_;
};

}  // namespace cypris
