// `cypris bench latency|throughput|serving`: dispatch only.
#include "app/cli/bench.h"

#include <cstdio>
#include <string>

namespace cypris::cli {

int run_bench(const Args& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::fprintf(stderr, "usage: cypris bench latency|throughput|serving [engine flags] [options]\n");
    return args.empty() ? 2 : 0;
  }
  const std::string& sub = args[0];
  const Args rest(args.begin() + 1, args.end());
  if (sub == "latency") return run_bench_latency(rest);
  if (sub == "throughput") return run_bench_throughput(rest);
  if (sub == "serving") return run_bench_serving(rest);
  std::fprintf(stderr, "cypris bench: unknown benchmark '%s'; choose latency, throughput or serving\n", sub.c_str());
  return 2;
}

}  // namespace cypris::cli
