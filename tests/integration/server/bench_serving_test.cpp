// `cypris bench serving` against the in-process server and fake engine: every request completes
// and the token counts add up (the fake engine generates exactly max_tokens).
#include "app/cli/bench_serving.h"

#include <gtest/gtest.h>

#include <fstream>

#include "app/cli/commands.h"
#include "engine/common/error.h"
#include "engine/request/sampling_params.h"
#include "tests/integration/server/server_fixture.h"

using namespace cypris;
using namespace cypris::test;

TEST(BenchServing, RandomPromptsCompletions) {
  TestServer s;
  cli::BenchServingOptions o;
  o.port = s.port;
  o.num_prompts = 8;
  o.input_len = 4;
  o.output_len = 5;
  o.max_concurrency = 4;
  auto r = cli::bench_serving(o);
  EXPECT_EQ(r.completed, 8) << (r.errors.empty() ? "" : r.errors[0]);
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(r.input_tokens, 32);
  EXPECT_EQ(r.output_tokens, 40);
  EXPECT_GT(r.ttft.mean, 0.0);
  EXPECT_GE(r.e2e.p99, r.e2e.p50);
  EXPECT_GE(r.e2e.mean, r.ttft.mean);
  // The request went out as the server expects: ids as the prompt, ignore_eos, streaming.
  auto sub = s.engine->submitted();
  ASSERT_EQ(sub.size(), 8u);
  EXPECT_EQ(sub[0].prompt_token_ids.size(), 4u);
  EXPECT_TRUE(sub[0].params->ignore_eos);
  const std::string report = cli::format_bench_serving(o, r);
  EXPECT_NE(report.find("Successful requests:"), std::string::npos);
  EXPECT_NE(report.find("P99 TTFT (ms):"), std::string::npos);
}

TEST(BenchServing, DatasetChatWithRateAndKey) {
  TestServer s([](EngineConfig& c) { c.server.api_keys = {"k"}; });
  const std::string path = std::string(::testing::TempDir()) + "/bench_prompts.jsonl";
  {
    std::ofstream out(path);
    out << "{\"prompt\": \"hello there\"}\n{\"prompt\": \"a b c\"}\n";
  }
  cli::BenchServingOptions o;
  o.base_url = "http://127.0.0.1:" + std::to_string(s.port);
  o.endpoint = "/v1/chat/completions";
  o.api_key = "k";
  o.dataset = path;
  o.num_prompts = 4;
  o.output_len = 3;
  o.request_rate = 200;
  auto r = cli::bench_serving(o);
  EXPECT_EQ(r.completed, 4) << (r.errors.empty() ? "" : r.errors[0]);
  EXPECT_EQ(r.output_tokens, 12);
  // Without the key every request fails, and the command says so.
  o.api_key.clear();
  EXPECT_THROW(cli::bench_serving(o), cypris::Error);  // /v1/models answers 401
  EXPECT_EQ(cli::run_bench_serving({"--port", std::to_string(s.port), "--num-prompts", "x"}), 2);
}
