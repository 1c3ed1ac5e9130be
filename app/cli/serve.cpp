#include <cstdio>

#include "app/cli/commands.h"

namespace cypris::cli {

int run_serve(const Args&) {
  std::fprintf(stderr, "cypris: 'serve' is not supported yet in this build\n");
  return 2;
}

}  // namespace cypris::cli
