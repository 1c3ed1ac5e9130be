// cypris [engine flags]: the desktop app.
#include <cstdio>

#include "app/cli/options_cli.h"

namespace cypris::cli {

int run_ui(const Args& args) {
  int code = 0;
  auto ctx = parse_cli(args, "usage: cypris [options]            desktop app\n"
                             "       cypris --no-ui --model MODEL [options]   headless server\n"
                             "       cypris generate --model MODEL --prompt TEXT [--max-tokens N]\n"
                             "       cypris download REPO [--revision R] [--include GLOB]...\n"
                             "       cypris bench latency|throughput|serving [options]", code);
  if (!ctx) return code;
  std::fprintf(stderr, "cypris: error: the desktop app is not supported yet in this build; see cypris --help\n");
  return 2;
}

}  // namespace cypris::cli
