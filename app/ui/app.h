// The desktop app: a GLFW + OpenGL 3.3 window with Dear ImGui (high-DPI aware, DejaVu Sans when
// installed), one main window with the load bar, a sidebar of panels (Models, Engine options,
// Samplers, API server, Stats, Logs) and the Chat. All slow work runs on background threads; the
// UI thread drains the UiQueue once per frame and never waits on the engine or a download.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "app/ui/state/services.h"
#include "engine/config/engine_config.h"

namespace cypris {

struct AppLaunch {
  EngineConfig cfg;                     // the command line's options: they pre-fill the options panel
  std::set<std::string> explicit_keys;  // which options the command line (or --config/env) set
  std::string screenshot;               // --screenshot PATH: save a PNG of the first frames, then quit
  std::string ui_script;                // --ui-script FILE: scripted actions (app/ui/state/ui_script.h)
};

// Runs the app until its window closes (or the script quits). Returns the exit code: 0, 1 when the
// window cannot be created (no display), or the script's code (see ui_script.h).
int run_desktop_app(const AppLaunch& launch, std::unique_ptr<AppServices> services);

}  // namespace cypris
