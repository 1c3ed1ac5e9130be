// What every panel of the desktop app can reach: the services, the controllers in app/ui/state/,
// the settings, and a few app-level actions. Panels read these and post commands; they never call
// into the engine themselves (the controllers run that work on background threads).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "app/ui/state/background_jobs.h"
#include "app/ui/state/chat_session.h"
#include "app/ui/state/engine_session.h"
#include "app/ui/state/hub_session.h"
#include "app/ui/state/log_buffer.h"
#include "app/ui/state/lora_session.h"
#include "app/ui/state/options_form.h"
#include "app/ui/state/quick_options.h"
#include "app/ui/state/server_session.h"
#include "app/ui/state/services.h"
#include "app/ui/state/settings.h"
#include "app/ui/state/ui_queue.h"

struct GLFWwindow;

namespace cypris {

struct AppContext {
  AppServices* services = nullptr;
  UiQueue* queue = nullptr;
  BackgroundJobs* jobs = nullptr;
  EngineSession* engine = nullptr;
  ChatSession* chat = nullptr;
  LoraSession* lora = nullptr;  // the loaded engine's LoRA adapters (Models panel, Chat combo)
  HubSession* hub = nullptr;
  ServerSession* server = nullptr;
  OptionsForm* options = nullptr;
  QuickOptions* quick = nullptr;  // the options panel's Quick view over *options
  // --ui-script options_view: "quick", "advanced" or "advanced_all"; the panel takes it (and clears it).
  std::string options_view_request;
  std::shared_ptr<LogBuffer> log;
  AppSettings* settings = nullptr;
  std::string config_dir;
  std::string presets_dir;  // the shipped sampler presets
  GLFWwindow* window = nullptr;
  float scale = 1.0f;  // DPI scale: multiply fixed pixel sizes by it

  std::function<double()> now_s;
  std::function<void()> save_settings;
  // Loads the model with the options form's config (validating first).
  std::function<void()> load_model;
  // Sets --model in the options form (from the Models panel) and opens the options panel.
  std::function<void(const std::string&)> use_model;
  std::function<void(const std::string&)> set_status;  // a short message in the status bar
};

// Base of the collapsible panels: one header in the sidebar, opened by the user or a script.
class Panel {
 public:
  explicit Panel(AppContext& ctx) : ctx_(ctx) {}
  virtual ~Panel() = default;
  virtual const char* title() const = 0;
  virtual const char* script_name() const = 0;  // "models", "options", ... (--ui-script open/close)
  virtual void draw() = 0;
  // Opens or closes the panel's header on the next frame.
  void request_open(bool open) { pending_open_ = open ? 1 : 0; }

 protected:
  // Draws the collapsing header; false when collapsed (draw() then returns early).
  bool header(bool default_open = false);
  AppContext& ctx_;

 private:
  int pending_open_ = -1;
};

}  // namespace cypris
