// Runs a --ui-script one frame at a time: each frame executes actions until one has to wait
// (for frames, a load, a reply), so the window keeps rendering between actions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "app/ui/app_context.h"
#include "app/ui/state/ui_script.h"

namespace cypris {

class ChatPanel;
class ServerPanel;

class ScriptRunner {
 public:
  ScriptRunner(AppContext& ctx, std::vector<ScriptAction> actions, std::vector<Panel*> panels, ChatPanel& chat,
               ServerPanel& server);

  // Called once per frame before the UI is drawn (so what it opens shows in the same frame). Returns the exit code once
  // the script is over (quit, end of script, or a failed wait/expectation).
  std::optional<int> step(double now_s);
  // A screenshot the script asked for in this frame (the app saves it after rendering).
  std::optional<std::string> take_screenshot_request();
  bool active() const { return pc_ < actions_.size(); }

 private:
  std::optional<int> fail(const ScriptAction& a, const std::string& msg, int code);
  AppContext& ctx_;
  std::vector<ScriptAction> actions_;
  std::vector<Panel*> panels_;
  ChatPanel& chat_;
  ServerPanel& server_;
  size_t pc_ = 0;
  double wait_started_ = -1.0;
  int frames_left_ = -1;
  std::optional<std::string> screenshot_;
};

}  // namespace cypris
