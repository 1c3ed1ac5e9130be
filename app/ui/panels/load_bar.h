// The bar at the top of the window: which model, Load / Unload / Cancel, the load progress, and
// the error of a failed load (the window stays usable: fix the options and load again).
#pragma once

#include "app/ui/app_context.h"

namespace cypris {

class LoadBar {
 public:
  explicit LoadBar(AppContext& ctx) : ctx_(ctx) {}
  void draw();

 private:
  AppContext& ctx_;
};

}  // namespace cypris
