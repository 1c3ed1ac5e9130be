// cypris --no-ui [engine flags]: load the model and serve the OpenAI and KoboldAI APIs until
// SIGINT/SIGTERM.
#include <cstdio>

#include "app/cli/options_cli.h"
#include "app/server/serve_main.h"
#include "engine/core/async_engine.h"

namespace cypris::cli {

int run_serve(const Args& args) {
  int code = 0;
  auto ctx = parse_cli(args, "usage: cypris --no-ui --model MODEL [options]\n\nServe the OpenAI and KoboldAI APIs "
                             "headless on --host/--port.", code);
  if (!ctx) return code;
  if (ctx->cfg.model.model.empty()) {
    std::fprintf(stderr, "cypris: error: --model is required with --no-ui (a local folder or a Hugging Face repo id)\n");
    return 2;
  }
  return serve_forever(ctx->cfg, [](const EngineConfig& cfg) -> std::shared_ptr<EngineClient> {
    return std::make_shared<AsyncEngine>(cfg);
  });
}

}  // namespace cypris::cli
