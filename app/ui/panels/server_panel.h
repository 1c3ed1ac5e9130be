// Server panel: switch the local OpenAI/Kobold API on and off (host, port 2242, API key, Kobold
// API), the address to paste into SillyTavern with a copy button, and the request log.
#pragma once

#include "app/ui/app_context.h"

namespace cypris {

class ServerPanel : public Panel {
 public:
  explicit ServerPanel(AppContext& ctx) : Panel(ctx) {}
  const char* title() const override { return "API server (SillyTavern)"; }
  const char* script_name() const override { return "server"; }
  void draw() override;
  void start();
  void stop();

 private:
  ServerSwitch current() const;
  bool show_key_ = false;
};

}  // namespace cypris
