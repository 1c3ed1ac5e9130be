// cypris [engine flags]: the desktop app. Engine flags given here pre-fill the app's options
// panel; --screenshot and --ui-script drive the app in tests. Built into cypris_ui when the UI is
// enabled (CYPRIS_HAVE_UI); otherwise it explains that this build has no desktop UI.
#include <cstdio>
#include <memory>
#include <string>

#include "app/cli/options_cli.h"

#ifdef CYPRIS_HAVE_UI
#include "app/ui/app.h"
#include "app/ui/state/real_services.h"
#endif

namespace cypris::cli {

namespace {

OptionSpec app_option(const std::string& name, std::string* target, const std::string& metavar,
                      const std::string& help) {
  OptionSpec s;
  s.name = name;
  s.group = "Desktop App Options";
  s.metavar = metavar;
  s.help = help;
  s.binding = bind_external(target);
  return s;
}

}  // namespace

int run_ui(const Args& args) {
  int code = 0;
  std::string screenshot, ui_script;
  const std::vector<OptionSpec> extra = {
      app_option("screenshot", &screenshot, "PATH",
                 "Save a PNG of the app window: of the first frames (then quit), or with --ui-script of the last "
                 "frame. For tests and bug reports."),
      app_option("ui-script", &ui_script, "FILE",
                 "Run a script of UI actions (open a panel, set an option, load, type, send, wait for the reply, "
                 "screenshot, quit), one per line. For tests.")};
  auto ctx = parse_cli(args,
                       "usage: cypris [options]            desktop app\n"
                       "       cypris --no-ui --model MODEL [options]   headless server\n"
                       "       cypris generate --model MODEL --prompt TEXT [--max-tokens N]\n"
                       "       cypris download REPO [--revision R] [--include GLOB]...\n"
                       "       cypris bench latency|throughput|serving [options]",
                       code, extra);
  if (!ctx) return code;
#ifdef CYPRIS_HAVE_UI
  AppLaunch launch;
  launch.cfg = ctx->cfg;
  launch.explicit_keys = ctx->parsed.explicit_keys;
  // `cypris MODEL` like `aphrodite run MODEL`: a lone positional argument is the model.
  if (ctx->parsed.positional.size() == 1 && launch.cfg.model.model.empty()) {
    launch.cfg.model.model = ctx->parsed.positional.front();
    launch.explicit_keys.insert("model");
  } else if (!ctx->parsed.positional.empty()) {
    std::fprintf(stderr, "cypris: error: unexpected argument '%s' (see cypris --help)\n",
                 ctx->parsed.positional.front().c_str());
    return 2;
  }
  launch.explicit_keys.erase("screenshot");
  launch.explicit_keys.erase("ui_script");
  launch.screenshot = screenshot;
  launch.ui_script = ui_script;
  try {
    return run_desktop_app(launch, std::make_unique<RealServices>());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cypris: error: %s\n", e.what());
    return 1;
  }
#else
  (void)screenshot;
  (void)ui_script;
  std::fprintf(stderr,
               "cypris: this build has no desktop UI (built without GLFW/OpenGL/Dear ImGui).\n"
               "Run the headless server instead: cypris --no-ui --model MODEL [options]\n");
  return 2;
#endif
}

}  // namespace cypris::cli
