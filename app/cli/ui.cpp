#include <cstdio>

#include "app/cli/commands.h"

namespace cypris::cli {

int run_ui(const Args&) {
  std::fprintf(stderr, "cypris: 'ui' is not supported yet in this build\n");
  return 2;
}

}  // namespace cypris::cli
