// --context-shift through the whole engine (issue #32): a greedy sequence that reaches the context
// length keeps its first tokens, drops half of the rest and goes on. The reference is built from
// fresh runs of an engine without context shift: run the window until it is full, shift it by the
// documented rule (keep min(prompt, max_model_len / 4) tokens, drop half of the others), run the
// shifted window as a new prompt, and so on. The shifted run must give exactly those tokens, on
// stories260k and on random-weight fixtures of other families (sliding windows, soft-capping, MoE),
// alone, batched, and with prefix caching and chunked prefill on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"
#include "tests/support/engine_jobs.h"

namespace cypris {
namespace {

using ::testing::HasSubstr;
using namespace testing_support;

GenerateRequest greedy(const std::string& id, const std::vector<int32_t>& prompt, int max_tokens) {
  auto p = std::make_shared<SamplingParams>();
  p->temperature = 0.0f;
  p->max_tokens = max_tokens;
  p->ignore_eos = true;
  return GenerateRequest{id, prompt, "", p};
}

// What --context-shift must produce for a greedy request, from fresh runs on `plain` (an engine
// without context shift whose context is max_len).
std::vector<int32_t> fresh_window_reference(Engine& plain, const std::vector<int32_t>& prompt, int max_tokens,
                                            int max_len, int* shifts) {
  std::vector<int32_t> window = prompt, produced;
  const int keep = std::min<int>(static_cast<int>(prompt.size()), max_len / 4);
  static int run = 0;
  while (static_cast<int>(produced.size()) < max_tokens) {
    const int n = std::min(max_len - static_cast<int>(window.size()), max_tokens - static_cast<int>(produced.size()));
    if (n > 0) {
      const std::string id = "fresh" + std::to_string(run++);
      const Outputs out = run_requests(plain, {greedy(id, window, n)});
      const auto& got = out.at(id);
      EXPECT_EQ(static_cast<int>(got.size()), n);
      produced.insert(produced.end(), got.begin(), got.end());
      window.insert(window.end(), got.begin(), got.end());
    }
    if (static_cast<int>(produced.size()) >= max_tokens) break;
    const int drop = std::max(1, (static_cast<int>(window.size()) - keep) / 2);
    window.erase(window.begin() + keep, window.begin() + keep + drop);
    ++*shifts;
  }
  return produced;
}

EngineConfig shift_config(EngineConfig cfg, int max_len) {
  cfg.model.max_model_len = max_len;
  cfg.cache.context_shift = true;
  return cfg;
}

TEST(ContextShift, Stories260kContinuesLikeAFreshRunOnTheShiftedWindow) {
  constexpr int kLen = 96;
  EngineConfig plain_cfg = stories_config();
  plain_cfg.model.max_model_len = kLen;
  Engine plain(plain_cfg);
  // Prompts shorter and longer than the kept quarter (24 tokens), one that leaves room for a token.
  std::vector<Job> jobs = make_jobs(3, 99);
  std::vector<std::vector<int32_t>> prompts = {{1, 400, 52, 290}, {}, {}};
  prompts[1].assign(jobs[0].prompt.begin(), jobs[0].prompt.begin() + std::min<size_t>(60, jobs[0].prompt.size()));
  prompts[2] = jobs[1].prompt;
  prompts[2].resize(kLen - 1, 300);
  std::vector<GenerateRequest> reqs;
  std::vector<std::vector<int32_t>> want;
  int shifts = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int max_tokens = 150 + 20 * static_cast<int>(i);
    want.push_back(fresh_window_reference(plain, prompts[i], max_tokens, kLen, &shifts));
    reqs.push_back(greedy("r" + std::to_string(i), prompts[i], max_tokens));
  }
  ASSERT_GE(shifts, 9) << "the requests must shift several times";

  // Alone, then batched, then with prefix caching and chunked prefill (a 32-token budget).
  EngineConfig cfg = shift_config(stories_config(), kLen);
  for (int mode = 0; mode < 3; ++mode) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    EngineConfig c = cfg;
    if (mode == 2) {
      c.cache.enable_prefix_caching = true;
      c.scheduler.enable_chunked_prefill = true;
      c.scheduler.max_num_batched_tokens = 32;
      c.scheduler.max_num_seqs = 16;
    }
    Engine engine(c);
    Outputs got;
    if (mode == 0) {
      for (const auto& r : reqs) got.merge(run_requests(engine, {r}));
    } else {
      got = run_requests(engine, reqs);
    }
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[reqs[i].request_id], want[i]) << reqs[i].request_id;
    EXPECT_EQ(engine.stats().num_context_shifts_total, shifts);
  }
}

TEST(ContextShift, FixtureFamiliesContinueLikeAFreshRun) {
  constexpr int kLen = 40;
  for (const char* name : {"mistral_sliding_window", "gemma2_softcap_sliding", "qwen3_moe_top2_of_8", "llama_gqa_tied",
                           "cohere2_sliding_nope"}) {
    SCOPED_TRACE(name);
    EngineConfig cfg = stories_config();
    cfg.model.model = std::string(CYPRIS_FIXTURES_DIR) + "/models/" + name;
    cfg.model.skip_tokenizer_init = true;
    cfg.model.max_model_len = kLen;
    Engine plain(cfg);
    const std::vector<int32_t> prompt = {1, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 20, 31};
    int shifts = 0;
    const std::vector<int32_t> want = fresh_window_reference(plain, prompt, 90, kLen, &shifts);
    ASSERT_GE(shifts, 3);
    Engine engine(shift_config(cfg, kLen));
    const Outputs got = run_requests(engine, {greedy("s", prompt, 90)});
    EXPECT_EQ(got.at("s"), want);
  }
}

TEST(ContextShift, LimitsAndRefusals) {
  constexpr int kLen = 64;
  EngineConfig plain_cfg = stories_config();
  plain_cfg.model.max_model_len = kLen;
  const std::vector<int32_t> prompt = {1, 400, 52, 290, 33};
  {
    // Without the flag, prompt + max_tokens past the context is refused as before.
    Engine plain(plain_cfg);
    auto stream = std::make_shared<RequestStream>("x");
    EXPECT_THAT([&] { plain.add_request(greedy("x", prompt, 100), stream); }, ::testing::Throws<Error>());
  }
  Engine engine(shift_config(plain_cfg, kLen));
  // max_tokens still ends the request, with finish_reason length, after exactly max_tokens tokens.
  auto stream = std::make_shared<RequestStream>("long");
  engine.add_request(greedy("long", prompt, 200), stream);
  size_t tokens = 0;
  std::string finish;
  for (int step = 0; engine.has_unfinished_requests() && step < 10000; ++step) {
    engine.step();
    while (auto o = stream->next(std::chrono::milliseconds(0))) {
      ASSERT_FALSE(o->error.has_value()) << *o->error;
      for (const auto& d : o->outputs) {
        tokens += d.token_ids.size();
        if (d.finish_reason) finish = *d.finish_reason;
      }
    }
  }
  EXPECT_EQ(tokens, 200u);
  EXPECT_EQ(finish, "length");
  EXPECT_GE(engine.stats().num_context_shifts_total, 4);
  // A prompt longer than the context is still refused; banned_strings and beam search are refused
  // by name (a rewind or a beam could reach dropped tokens).
  auto refused = [&](GenerateRequest r) {
    auto s = std::make_shared<RequestStream>(r.request_id);
    try {
      engine.add_request(r, s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    while (auto o = s->next(std::chrono::milliseconds(0))) {
      if (o->error) return *o->error;
    }
    return std::string();
  };
  EXPECT_THAT(refused(greedy("too-long", std::vector<int32_t>(kLen + 1, 300), 10)), HasSubstr("context length"));
  EXPECT_THAT(refused(greedy("full", std::vector<int32_t>(kLen, 300), 10)), HasSubstr("context length"));
  GenerateRequest banned = greedy("banned", prompt, 100);
  auto bp = std::make_shared<SamplingParams>(*banned.params);
  bp->banned_strings = {"dragon"};
  banned.params = bp;
  EXPECT_THAT(refused(banned), HasSubstr("--context-shift"));
  GenerateRequest beam = greedy("beam", prompt, 100);
  auto beam_p = std::make_shared<SamplingParams>(*beam.params);
  beam_p->use_beam_search = true;
  beam_p->best_of = 2;
  beam.params = beam_p;
  EXPECT_THAT(refused(beam), HasSubstr("--context-shift"));
}

}  // namespace
}  // namespace cypris
