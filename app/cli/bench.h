// The `cypris bench` subcommands; bench.cpp dispatches, each lives in app/cli/bench_<name>.cpp.
#pragma once

#include "app/cli/commands.h"

namespace cypris::cli {

int run_bench_latency(const Args& args);  // cypris bench latency [engine flags] [--input-len N] ...

}  // namespace cypris::cli
