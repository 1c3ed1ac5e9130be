#include <cstdio>

#include "app/cli/commands.h"

namespace cypris::cli {

int run_generate(const Args&) {
  std::fprintf(stderr, "cypris: 'generate' is not supported yet in this build\n");
  return 2;
}

}  // namespace cypris::cli
