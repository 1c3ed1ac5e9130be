// `cypris bench serving`: a load generator against a running OpenAI-compatible server, reporting
// TTFT, TPOT, inter-token and end-to-end latency percentiles and throughput, like vLLM's
// benchmark_serving.py. The pieces are here so tests can run it against an in-process server.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cypris::cli {

struct BenchServingOptions {
  std::string base_url;  // http(s)://host:port (built from --host/--port when empty)
  std::string host = "127.0.0.1";
  int port = 2242;
  std::string endpoint = "/v1/completions";  // or /v1/chat/completions
  std::string model;                         // empty: the first id of /v1/models
  std::string api_key;
  int num_prompts = 100;
  double request_rate = 0.0;  // requests per second, Poisson arrivals; 0 = all at once (inf)
  int max_concurrency = 0;    // 0 = unlimited
  int input_len = 128;        // random prompts: this many random token ids
  int output_len = 128;
  std::string dataset;  // a file of prompts: .jsonl with "prompt" or one prompt per line
  uint64_t seed = 0;
  bool ignore_eos = true;  // so every request generates output_len tokens
};

struct LatencySummary {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;  // milliseconds
};

struct BenchServingResult {
  int completed = 0;
  int failed = 0;
  std::vector<std::string> errors;  // the first few failures
  double duration_s = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  LatencySummary ttft, tpot, itl, e2e;
  double request_throughput = 0, output_throughput = 0, total_throughput = 0;
};

// Percentiles by linear interpolation between closest ranks (numpy's default).
LatencySummary summarize_ms(std::vector<double> values_ms);

BenchServingResult bench_serving(const BenchServingOptions& opts);
std::string format_bench_serving(const BenchServingOptions& opts, const BenchServingResult& r);

}  // namespace cypris::cli
