// Test support for the engine tests that compare whole request results (speculative decoding with
// an n-gram or a draft model against the same engine without it): a request from a prompt and
// sampling parameters, the requests run to the end with everything they streamed, and the check
// that speculation actually drafted, accepted and rejected tokens.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"

namespace cypris::testing_support {

// What one request streamed: generated tokens, text, finish and stop reasons, logprobs of the
// generated tokens and of the prompt.
struct FullResult {
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish_reason;
  std::string stop_reason;
  std::vector<PositionLogprobs> logprobs;
  std::vector<PositionLogprobs> prompt_logprobs;
};

inline GenerateRequest make_request(const std::string& id, const std::vector<int32_t>& prompt,
                                    const SamplingParams& p) {
  GenerateRequest r;
  r.request_id = id;
  r.prompt_token_ids = prompt;
  r.params = std::make_shared<SamplingParams>(p);
  return r;
}

// Submits the requests up front and steps the engine until all finish; each request's result by
// id. Fails the test on an error output or when the engine does not finish.
inline std::map<std::string, FullResult> run_full(Engine& engine, const std::vector<GenerateRequest>& reqs) {
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) {
    streams[r.request_id] = std::make_shared<RequestStream>(r.request_id);
    engine.add_request(r, streams[r.request_id]);
  }
  std::map<std::string, FullResult> out;
  for (int step = 0; engine.has_unfinished_requests() && step < 100000; ++step) {
    engine.step();
    for (auto& [id, st] : streams) {
      while (auto o = st->next(std::chrono::milliseconds(0))) {
        EXPECT_FALSE(o->error.has_value()) << id << ": " << *o->error;
        FullResult& f = out[id];
        f.prompt_logprobs.insert(f.prompt_logprobs.end(), o->prompt_logprobs.begin(), o->prompt_logprobs.end());
        for (const auto& d : o->outputs) {
          f.tokens.insert(f.tokens.end(), d.token_ids.begin(), d.token_ids.end());
          f.text += d.text;
          f.logprobs.insert(f.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
          if (d.finish_reason) f.finish_reason = *d.finish_reason;
          if (d.stop_reason) f.stop_reason = *d.stop_reason;
        }
      }
    }
  }
  EXPECT_FALSE(engine.has_unfinished_requests());
  return out;
}

// The generated tokens of each result, by request id.
inline std::map<std::string, std::vector<int32_t>> tokens_of(const std::map<std::string, FullResult>& results) {
  std::map<std::string, std::vector<int32_t>> out;
  for (const auto& [id, r] : results) out[id] = r.tokens;
  return out;
}

// The engine speculated and its drafts were both accepted and rejected: otherwise a comparison with
// the engine without speculation tested nothing (or not the rollback).
inline void expect_speculated(const Engine& engine) {
  const EngineStats s = engine.stats();
  EXPECT_TRUE(s.spec_decode);
  EXPECT_GT(s.spec_draft_tokens_total, 0) << "no drafts: the comparison tested nothing";
  EXPECT_GT(s.spec_accepted_tokens_total, 0) << "no accepted drafts: the comparison tested nothing";
  EXPECT_LT(s.spec_accepted_tokens_total, s.spec_draft_tokens_total) << "no rejections: the rollback went untested";
}

}  // namespace cypris::testing_support
