// The subcommands of the one `cypris` binary. main.cpp only dispatches; each command lives in
// its own file under app/cli/ and takes the arguments after its name.
#pragma once

#include <string>
#include <vector>

namespace cypris::cli {

using Args = std::vector<std::string>;

// Each returns the process exit code. Errors are reported on stderr, never thrown out.
int run_serve(const Args& args);     // cypris --no-ui [engine flags]
int run_ui(const Args& args);        // cypris [engine flags]   (desktop app)
int run_generate(const Args& args);  // cypris generate --model M --prompt TEXT ...
int run_bench(const Args& args);     // cypris bench latency|throughput|serving ...
int run_download(const Args& args);
// cypris bench serving ...: load test against a running server (app/cli/bench_serving.cpp).
int run_bench_serving(const std::vector<std::string>& args);  // cypris download REPO [--revision R] [--include GLOB]...

}  // namespace cypris::cli
