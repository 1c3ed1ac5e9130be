// --context-shift through the whole engine (issue #32): a greedy sequence that reaches the context
// length keeps its first tokens, drops half of the rest and goes on. The reference is built from
// fresh runs of an engine without context shift: run the window until it is full, shift it by the
// documented rule (keep min(prompt, max_model_len / 4) tokens, drop half of the others), run the
// shifted window as a new prompt, and so on. The shifted run must give exactly those tokens, on
// stories260k and on random-weight fixtures of other families (sliding windows, soft-capping, MoE),
// alone, batched, and with prefix caching and chunked prefill on (--context-shift-mode recompute).
//
// By rotation (the default mode) the moved tokens keep their cached K/V with the keys turned to the
// new positions. Their values and the keys of every layer after the first were computed with the
// dropped tokens in view, so in general the output is not a fresh run's; on a one-layer model it is:
// the first layer's K and V depend only on the token and (K) its position, so rotated keys equal a
// fresh prefill's up to float rounding (~1e-7 relative, far below the logit gaps of greedy choices
// here), and the greedy continuation equals the fresh reference. Those are the exact tests of the
// rotation (each family's rotary variant: default, linear, llama3, yarn, partial, interleaved
// checkpoints); families that cannot rotate must give the recompute result.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"
#include "tests/support/engine_jobs.h"
#include "tests/support/safetensors_edit.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

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

EngineConfig shift_config(EngineConfig cfg, int max_len, const std::string& mode = "recompute") {
  cfg.model.max_model_len = max_len;
  cfg.cache.context_shift = true;
  cfg.cache.context_shift_mode = mode;
  return cfg;
}

// cfg with prefix caching and chunked prefill: a budget of `budget` tokens a step over at most `seqs`
// sequences.
EngineConfig with_prefix_caching_and_chunks(EngineConfig cfg, int budget, int seqs) {
  cfg.cache.enable_prefix_caching = true;
  cfg.scheduler.enable_chunked_prefill = true;
  cfg.scheduler.max_num_batched_tokens = budget;
  cfg.scheduler.max_num_seqs = seqs;
  return cfg;
}

EngineConfig fixture_config(const std::string& dir) {
  EngineConfig cfg = stories_config();
  cfg.model.model = dir;
  cfg.model.skip_tokenizer_init = true;
  return cfg;
}

// A copy of a model fixture with only its first decoder layer (and config edits: rope_scaling or
// sliding windows removed, to reach a family's other rotary variants).
std::string one_layer_copy(const std::string& name, const std::function<void(nlohmann::json&)>& edit = {}) {
  namespace fs = std::filesystem;
  const fs::path to = fs::temp_directory_path() / ("cypris_shift_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(to);
  auto tensors = copy_checkpoint(fs::path(CYPRIS_FIXTURES_DIR) / "models" / name, to);
  for (auto it = tensors.begin(); it != tensors.end();) {
    const bool later_layer = it->first.rfind("model.layers.", 0) == 0 && it->first.rfind("model.layers.0.", 0) != 0;
    it = later_layer ? tensors.erase(it) : std::next(it);
  }
  write_tensors(to / "model.safetensors", tensors);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(to / "config.json"));
  cfg["num_hidden_layers"] = 1;
  if (edit) edit(cfg);
  std::ofstream(to / "config.json") << cfg.dump(2);
  return to.string();
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
    if (mode == 2) c = with_prefix_caching_and_chunks(c, 32, 16);
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

TEST(ContextShift, RotationOnOneLayerModelsEqualsAFreshRunOnTheShiftedWindow) {
  constexpr int kLen = 40;
  struct Family {
    const char* fixture;
    const char* what;
    std::function<void(nlohmann::json&)> edit;
  };
  const std::vector<Family> families = {
      {"llama_gqa_tied", "default rope, GQA", {}},
      {"llama_linear", "linear scaling", {}},
      {"llama_untied_llama3_bias", "llama3 scaling", {}},
      {"llama_yarn", "yarn (attention factor)", {}},
      {"phi3_fused_longrope", "partial rotary 0.5, fused qkv (longrope and sliding window removed)",
       [](nlohmann::json& c) {
         c.erase("rope_scaling");
         c.erase("sliding_window");
       }},
      {"cohere_parallel_block", "interleaved rotary checkpoint", {}},
      {"qwen3_qknorm_sliding", "q/k norms (sliding window removed)",
       [](nlohmann::json& c) {
         c.erase("sliding_window");
         c["use_sliding_window"] = false;
       }},
      {"mixtral_top2_of_8", "MoE (sliding window removed)", [](nlohmann::json& c) { c.erase("sliding_window"); }},
  };
  const std::vector<int32_t> prompt = {1, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 20, 31};
  const std::vector<int32_t> prompt2 = {1, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 21, 22, 23, 24, 25, 26, 27};
  for (const Family& f : families) {
    SCOPED_TRACE(std::string(f.fixture) + ": " + f.what);
    const std::string dir = one_layer_copy(f.fixture, f.edit);
    EngineConfig cfg = fixture_config(dir);
    cfg.model.max_model_len = kLen;
    Engine plain(cfg);
    int shifts = 0;
    const std::vector<int32_t> want = fresh_window_reference(plain, prompt, 90, kLen, &shifts);
    const std::vector<int32_t> want2 = fresh_window_reference(plain, prompt2, 70, kLen, &shifts);
    ASSERT_GE(shifts, 5);
    for (int mode = 0; mode < 3; ++mode) {
      SCOPED_TRACE(mode == 0 ? "alone" : mode == 1 ? "batched" : "prefix caching + chunked prefill");
      EngineConfig c = shift_config(cfg, kLen, "rotate");
      if (mode == 2) c = with_prefix_caching_and_chunks(c, 8, 8);
      Engine engine(c);
      Outputs got;
      if (mode == 0) {
        got = run_requests(engine, {greedy("s", prompt, 90)});
        got.merge(run_requests(engine, {greedy("t", prompt2, 70)}));
      } else {
        // With an unshifted batch-mate that finishes before the context is full.
        got = run_requests(engine, {greedy("s", prompt, 90), greedy("t", prompt2, 70), greedy("u", prompt, 20)});
      }
      EXPECT_EQ(got.at("s"), want);
      EXPECT_EQ(got.at("t"), want2);
      EXPECT_EQ(engine.stats().num_context_shifts_total, shifts);
      EXPECT_GT(engine.stats().context_shift_moved_tokens_total, 0) << "the shifts were not by rotation";
    }
    std::filesystem::remove_all(dir);
  }
}

TEST(ContextShift, RotationWithAnFp8CacheStaysCloseToAFreshFp8Run) {
  // An fp8 cache rounds each key once when written; a rotated key is decoded, rotated and rounded
  // again, so it may differ from a fresh fp8 key by one fp8 step (6% for e4m3). That moves the
  // scores a little: compare the tokens until the first difference and require most of them equal.
  constexpr int kLen = 40;
  const std::string dir = one_layer_copy("llama_gqa_tied");
  EngineConfig cfg = fixture_config(dir);
  cfg.model.max_model_len = kLen;
  cfg.quant.kv_cache_dtype = "fp8";
  Engine plain(cfg);
  const std::vector<int32_t> prompt = {1, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 20, 31};
  int shifts = 0;
  const std::vector<int32_t> want = fresh_window_reference(plain, prompt, 90, kLen, &shifts);
  Engine engine(shift_config(cfg, kLen, "rotate"));
  const Outputs got = run_requests(engine, {greedy("s", prompt, 90)});
  ASSERT_EQ(got.at("s").size(), want.size());
  EXPECT_GT(engine.stats().context_shift_moved_tokens_total, 0);
  // Up to the first shift the runs are the same computation.
  const size_t before_shift = kLen - prompt.size();
  EXPECT_TRUE(std::equal(want.begin(), want.begin() + before_shift, got.at("s").begin()));
  int same = 0;
  for (size_t i = 0; i < want.size(); ++i) same += want[i] == got.at("s")[i];
  EXPECT_GE(same, int(want.size()) * 3 / 4);
  std::filesystem::remove_all(dir);
}

TEST(ContextShift, FamiliesThatCannotRotateRecompute) {
  // Sliding windows, dynamic NTK, longrope, NoPE layers: --context-shift-mode rotate falls back to
  // recomputing, which gives exactly the fresh run on the shifted window.
  for (const char* name : {"mistral_sliding_window", "gemma2_softcap_sliding", "cohere2_sliding_nope", "llama_dynamic",
                           "phi3_fused_longrope", "gemma3_local_global"}) {
    SCOPED_TRACE(name);
    const int kLen = std::string(name) == "llama_dynamic" ? 24 : 40;  // the longest its dynamic scaling allows
    EngineConfig cfg = fixture_config(std::string(CYPRIS_FIXTURES_DIR) + "/models/" + name);
    cfg.model.max_model_len = kLen;
    Engine plain(cfg);
    const std::vector<int32_t> prompt = {1, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 20, 31};
    int shifts = 0;
    const std::vector<int32_t> want = fresh_window_reference(plain, prompt, 90, kLen, &shifts);
    Engine engine(shift_config(cfg, kLen, "rotate"));
    EXPECT_EQ(run_requests(engine, {greedy("s", prompt, 90)}).at("s"), want);
    EXPECT_EQ(engine.stats().context_shift_moved_tokens_total, 0);
  }
}

TEST(ContextShift, RotationOnStories260kIsTheSameAloneBatchedAndChunked) {
  // Five layers: rotation is an approximation here (see the top of the file), so the check is that
  // it is one computation: the same tokens alone, batched, and with prefix caching and chunked
  // prefill, with the moved tokens' KV kept at every shift.
  constexpr int kLen = 96;
  std::vector<Job> jobs = make_jobs(3, 99);
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < jobs.size(); ++i) {
    std::vector<int32_t> p = jobs[i].prompt;
    p.resize(std::min<size_t>(p.size(), 60));
    reqs.push_back(greedy("r" + std::to_string(i), p, 150));
  }
  EngineConfig cfg = shift_config(stories_config(), kLen, "rotate");
  Outputs alone;
  {
    Engine engine(cfg);
    for (const auto& r : reqs) alone.merge(run_requests(engine, {r}));
    EXPECT_GE(engine.stats().num_context_shifts_total, 6);
    EXPECT_GT(engine.stats().context_shift_moved_tokens_total, 6 * 30);
  }
  for (int mode = 1; mode < 3; ++mode) {
    EngineConfig c = cfg;
    if (mode == 2) c = with_prefix_caching_and_chunks(c, 32, 16);
    Engine engine(c);
    const Outputs got = run_requests(engine, reqs);
    for (const auto& r : reqs) EXPECT_EQ(got.at(r.request_id), alone.at(r.request_id)) << "mode " << mode;
  }
}

}  // namespace
}  // namespace cypris
