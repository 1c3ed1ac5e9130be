// Logs panel: the engine log (a spdlog sink into LogBuffer) with a level filter.
#pragma once

#include "app/ui/app_context.h"
#include "app/ui/state/log_buffer.h"

namespace cypris {

class LogsPanel : public Panel {
 public:
  explicit LogsPanel(AppContext& ctx) : Panel(ctx) {}
  const char* title() const override { return "Logs"; }
  const char* script_name() const override { return "logs"; }
  void draw() override;

 private:
  int level_ = static_cast<int>(LogLevel::Info);
  bool follow_ = true;
};

}  // namespace cypris
