#include <cstdio>

#include "app/cli/commands.h"

namespace cypris::cli {

int run_bench(const Args&) {
  std::fprintf(stderr, "cypris: 'bench' is not supported yet in this build\n");
  return 2;
}

}  // namespace cypris::cli
