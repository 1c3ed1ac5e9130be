// cypris --no-ui [engine flags]: headless serving.
#include <cstdio>

#include "app/cli/options_cli.h"

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
  std::fprintf(stderr, "cypris: error: the HTTP server is not supported yet in this build\n");
  return 2;
}

}  // namespace cypris::cli
