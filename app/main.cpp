// Mode dispatch only: desktop UI (default), --no-ui server, and the subcommands.
#include <cstdio>
#include <string>

#include "app/cli/commands.h"

int main(int argc, char** argv) {
  using namespace cypris::cli;
  Args args(argv + 1, argv + argc);
  if (!args.empty()) {
    const std::string& cmd = args.front();
    Args rest(args.begin() + 1, args.end());
    if (cmd == "generate") return run_generate(rest);
    if (cmd == "bench") return run_bench(rest);
    if (cmd == "download") return run_download(rest);
    if (cmd == "serve") return run_serve(rest);
  }
  for (const auto& a : args) {
    if (a == "--no-ui") return run_serve(args);
  }
  return run_ui(args);
}
