#include <cstdio>

#include "app/cli/commands.h"

namespace cypris::cli {

int run_download(const Args&) {
  std::fprintf(stderr, "cypris: 'download' is not supported yet in this build\n");
  return 2;
}

}  // namespace cypris::cli
