#include "app/server/metrics.h"

#include <gtest/gtest.h>

using namespace cypris::server;

TEST(Metrics, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5.0);
  std::string out;
  h.render(out, "x", "m=\"a\"");
  EXPECT_NE(out.find("x_bucket{m=\"a\",le=\"0.1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{m=\"a\",le=\"1\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{m=\"a\",le=\"+Inf\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_count{m=\"a\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_sum{m=\"a\"} 5.55"), std::string::npos) << out;
}

TEST(Metrics, RendersEngineGaugesWithAphroditeNames) {
  ServerMetrics m;
  cypris::EngineStats s;
  s.num_running = 3;
  s.num_waiting = 2;
  s.kv_cache_usage = 0.5;
  s.prompt_tokens_total = 100;
  s.generation_tokens_total = 40;
  std::string out = m.render(s, "my-model");
  EXPECT_NE(out.find("aphrodite:num_requests_running{model_name=\"my-model\"} 3\n"), std::string::npos);
  EXPECT_NE(out.find("aphrodite:num_requests_waiting{model_name=\"my-model\"} 2\n"), std::string::npos);
  EXPECT_NE(out.find("aphrodite:num_requests_swapped{model_name=\"my-model\"} 0\n"), std::string::npos);
  EXPECT_NE(out.find("aphrodite:gpu_cache_usage_perc{model_name=\"my-model\"} 0.5\n"), std::string::npos);
  EXPECT_NE(out.find("aphrodite:prompt_tokens_total{model_name=\"my-model\"} 100\n"), std::string::npos);
  EXPECT_NE(out.find("aphrodite:generation_tokens_total{model_name=\"my-model\"} 40\n"), std::string::npos);
  EXPECT_NE(out.find("# TYPE aphrodite:time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_NE(out.find("aphrodite:e2e_request_latency_seconds_count"), std::string::npos);
}

TEST(Metrics, RequestTimerFeedsHistograms) {
  ServerMetrics m;
  RequestTimer t(&m);
  t.on_tokens(1);  // first token: TTFT
  t.on_tokens(2);  // two more: two inter-token samples
  t.finish("length");
  std::string out = m.render({}, "m");
  EXPECT_NE(out.find("aphrodite:time_to_first_token_seconds_count{model_name=\"m\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("aphrodite:time_per_output_token_seconds_count{model_name=\"m\"} 2\n"), std::string::npos);
  EXPECT_NE(out.find("aphrodite:e2e_request_latency_seconds_count{model_name=\"m\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("finished_reason=\"length\"} 1\n"), std::string::npos);
}

TEST(Metrics, SpeculativeDecodingCountersOnlyWithSpeculation) {
  ServerMetrics m;
  cypris::EngineStats s;
  EXPECT_EQ(m.render(s, "m").find("spec_decode"), std::string::npos) << "no spec-decode metrics without it";
  s.spec_decode = true;
  s.spec_draft_tokens_total = 200;
  s.spec_accepted_tokens_total = 50;
  s.spec_emitted_tokens_total = 90;
  s.spec_max_emitted_tokens_total = 240;  // 40 verification steps of 5 drafts
  const std::string out = m.render(s, "m");
  EXPECT_NE(out.find("aphrodite:spec_decode_num_draft_tokens_total{model_name=\"m\"} 200\n"), std::string::npos);
  EXPECT_NE(out.find("aphrodite:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 50\n"), std::string::npos);
  EXPECT_NE(out.find("aphrodite:spec_decode_num_emitted_tokens_total{model_name=\"m\"} 90\n"), std::string::npos);
  EXPECT_NE(out.find("aphrodite:spec_decode_draft_acceptance_rate{model_name=\"m\"} 0.25\n"), std::string::npos);
  EXPECT_NE(out.find("aphrodite:spec_decode_efficiency{model_name=\"m\"} 0.375\n"), std::string::npos);
}
