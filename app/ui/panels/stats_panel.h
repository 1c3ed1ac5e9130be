// Stats panel: live KV-cache usage, running and waiting requests, and throughput over time.
#pragma once

#include "app/ui/app_context.h"

namespace cypris {

class StatsPanel : public Panel {
 public:
  explicit StatsPanel(AppContext& ctx) : Panel(ctx) {}
  const char* title() const override { return "Stats"; }
  const char* script_name() const override { return "stats"; }
  void draw() override;
};

}  // namespace cypris
