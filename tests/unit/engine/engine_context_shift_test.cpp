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
//
// Across requests (ContextReuse.*): a chat re-sent each turn with its oldest messages dropped takes
// the finished turn's KV; on one layer its replies equal fresh runs on the new prompts, on stories260k
// they stay within the tolerance docs/context_shift.md states. Tensor parallelism (-tp 2) gives -tp
// 1's tokens for both kinds of rotation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "engine/kv/kv_reuse.h"
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

// --context-shift across requests (the SillyTavern case): a chat re-sent each turn with its oldest
// messages dropped after the system prompt. The next turn takes the finished turn's KV: the system
// prompt where it was, the later messages and the reply moved down with their keys rotated; only the
// rest is computed. On one layer that is exactly a fresh run on the new prompt (the argument at the
// top of this file), so the reference is an engine without context shift.
struct ChatTurns {
  // Turn k's prompt: the system prompt, then the history (the earlier messages, then each turn's
  // message and reply) from index first_kept[k] on, then turn k's message.
  std::vector<int32_t> system;
  std::vector<std::vector<int32_t>> history;   // before the first turn
  std::vector<std::vector<int32_t>> messages;  // one per turn
  std::vector<size_t> first_kept;
};

std::vector<int32_t> turn_prompt(const ChatTurns& c, size_t turn, const std::vector<std::vector<int32_t>>& history) {
  std::vector<int32_t> p = c.system;
  for (size_t i = c.first_kept[turn]; i < history.size(); ++i) p.insert(p.end(), history[i].begin(), history[i].end());
  p.insert(p.end(), c.messages[turn].begin(), c.messages[turn].end());
  return p;
}

// Two chats (tokens < 64: the fixtures' vocabulary; different system prompts, so neither reuses the
// other's), three turns each; every turn drops the oldest message of the history.
std::vector<ChatTurns> two_chats() {
  auto msg = [](int first, int n) {
    std::vector<int32_t> m;
    for (int i = 0; i < n; ++i) m.push_back(10 + (first + 7 * i) % 53);
    return m;
  };
  return {ChatTurns{{1, 5, 6, 7, 8, 9}, {msg(0, 10), msg(3, 18)}, {msg(11, 4), msg(17, 4), msg(23, 4)}, {0, 1, 2}},
          ChatTurns{{2, 3, 4, 5, 6}, {msg(30, 8), msg(44, 20)}, {msg(50, 3), msg(5, 5), msg(9, 4)}, {0, 1, 2}}};
}

// Runs the chats turn by turn on `engine` (the chats of a turn batched unless `alone`), each turn's
// prompts greedy with `reply` tokens; returns every turn's replies ("c<chat>t<turn>") and appends the
// prompts (turn by turn, chat by chat) to `prompts`.
Outputs run_chats(Engine& engine, const std::vector<ChatTurns>& chats, int reply, bool alone,
                  std::vector<std::vector<int32_t>>* prompts = nullptr) {
  std::vector<std::vector<std::vector<int32_t>>> history;
  for (const auto& c : chats) history.push_back(c.history);
  Outputs all;
  for (size_t turn = 0; turn < chats[0].messages.size(); ++turn) {
    std::vector<GenerateRequest> reqs;
    for (size_t c = 0; c < chats.size(); ++c) {
      const auto prompt = turn_prompt(chats[c], turn, history[c]);
      if (prompts) prompts->push_back(prompt);
      reqs.push_back(greedy("c" + std::to_string(c) + "t" + std::to_string(turn), prompt, reply));
    }
    Outputs got;
    if (alone) {
      for (const auto& r : reqs) got.merge(run_requests(engine, {r}));
    } else {
      got = run_requests(engine, reqs);
    }
    for (size_t c = 0; c < chats.size(); ++c) {
      history[c].push_back(chats[c].messages[turn]);
      history[c].push_back(got.at(reqs[c].request_id));
    }
    all.merge(got);
  }
  return all;
}

// Tokens the turns after the first reuse, by construction: the system prompt in place, and moved
// down (into *moved) the previous prompt's history from this turn's first kept entry on, its message
// and its reply but the last token (which has no KV).
int64_t expected_reuse(const std::vector<ChatTurns>& chats, int reply, int64_t* moved) {
  int64_t total = 0;
  for (const auto& c : chats) {
    std::vector<int64_t> sizes;
    for (const auto& h : c.history) sizes.push_back(int64_t(h.size()));
    for (size_t turn = 1; turn < c.messages.size(); ++turn) {
      sizes.push_back(int64_t(c.messages[turn - 1].size()));
      sizes.push_back(reply);
      int64_t run = -1;
      for (size_t i = c.first_kept[turn]; i < sizes.size(); ++i) run += sizes[i];
      total += int64_t(c.system.size()) + run;
      *moved += run;
    }
  }
  return total;
}

TEST(ContextReuse, ATrimmedChatOnOneLayerModelsEqualsAFreshRunOnTheNewPrompt) {
  constexpr int kLen = 64, kReply = 8;
  struct Family {
    const char* fixture;
    std::function<void(nlohmann::json&)> edit;
  };
  const std::vector<Family> families = {
      {"llama_gqa_tied", {}},
      {"llama_yarn", {}},
      {"cohere_parallel_block", {}},  // interleaved rotary checkpoint
      {"phi3_fused_longrope",         // partial rotary
       [](nlohmann::json& c) {
         c.erase("rope_scaling");
         c.erase("sliding_window");
       }},
  };
  const auto chats = two_chats();
  int64_t moved_want = 0;
  const int64_t reuse_want = expected_reuse(chats, kReply, &moved_want);
  for (const Family& f : families) {
    SCOPED_TRACE(f.fixture);
    const std::string dir = one_layer_copy(f.fixture, f.edit);
    EngineConfig cfg = fixture_config(dir);
    cfg.model.max_model_len = kLen;
    // The reference: each prompt on a fresh engine without context shift (the replies it gives are
    // the history of the next prompts, so the prompts are the same as long as the replies are).
    Outputs want;
    {
      Engine plain(cfg);
      want = run_chats(plain, chats, kReply, /*alone=*/true);
    }
    for (int mode = 0; mode < 3; ++mode) {
      SCOPED_TRACE(mode == 0 ? "alone" : mode == 1 ? "batched" : "prefix caching + chunked prefill");
      EngineConfig c = shift_config(cfg, kLen, "rotate");
      if (mode == 2) c = with_prefix_caching_and_chunks(c, 8, 8);
      Engine engine(c);
      const Outputs got = run_chats(engine, chats, kReply, mode == 0);
      EXPECT_EQ(got, want);
      const EngineStats st = engine.stats();
      EXPECT_EQ(st.context_reuses_total, 4);
      // Prefix-cache hits (mode 2) are not counted as reuse; the system prompt is shorter than a block.
      EXPECT_EQ(st.context_reused_tokens_total, reuse_want);
      EXPECT_EQ(st.context_reuse_moved_tokens_total, moved_want);
      EXPECT_EQ(st.num_context_shifts_total, 0);
      // The finished turns' KV was copied, not moved: turn 1's prompt again gives turn 1's reply, in
      // the same batch as a prompt that reuses the last turn (sharing its blocks with prefix caching).
      std::vector<std::vector<int32_t>> prompts;
      {
        Engine plain(cfg);
        run_chats(plain, {chats[0]}, kReply, true, &prompts);
      }
      auto trimmed = prompts.back();
      trimmed.erase(trimmed.begin() + 6, trimmed.begin() + 6 + 5);  // the last turn, 5 more tokens dropped
      Outputs fresh;
      {
        Engine plain(cfg);
        fresh = run_requests(plain, {greedy("again", prompts[0], kReply), greedy("trim", trimmed, kReply)});
      }
      const Outputs again =
          run_requests(engine, {greedy("again", prompts[0], kReply), greedy("trim", trimmed, kReply)});
      EXPECT_EQ(again.at("again"), want.at("c0t0"));
      EXPECT_EQ(again, fresh);
      EXPECT_GT(engine.stats().context_reuse_moved_tokens_total, moved_want) << "'trim' moved nothing";
    }
    std::filesystem::remove_all(dir);
  }
}

TEST(ContextReuse, NothingIsReusedWithoutAMatchingStretchOrWhereKeysCannotRotate) {
  constexpr int kLen = 64;
  const std::string dir = one_layer_copy("llama_gqa_tied");
  EngineConfig cfg = fixture_config(dir);
  cfg.model.max_model_len = kLen;
  Engine engine(shift_config(cfg, kLen, "rotate"));
  const std::vector<int32_t> first = {1, 5, 6, 7, 8, 9, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30,
                                      31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43};
  run_requests(engine, {greedy("first", first, 8)});
  // Same system prompt, other messages: only the system prompt is reused, in place.
  std::vector<int32_t> other = {1, 5, 6, 7, 8, 9};
  for (int i = 0; i < 24; ++i) other.push_back(44 + i % 19);
  Engine plain(cfg);
  EXPECT_EQ(run_requests(engine, {greedy("other", other, 8)}), run_requests(plain, {greedy("other", other, 8)}));
  EXPECT_EQ(engine.stats().context_reused_tokens_total, 6);
  EXPECT_EQ(engine.stats().context_reuse_moved_tokens_total, 0);
  std::filesystem::remove_all(dir);
  // Recompute mode, and families whose keys cannot be rotated: the whole prompt is computed.
  const auto chats = two_chats();
  for (const auto& [name, mode] : std::vector<std::pair<std::string, std::string>>{
           {"llama_gqa_tied", "recompute"}, {"mistral_sliding_window", "rotate"}, {"phi3_fused_longrope", "rotate"}}) {
    SCOPED_TRACE(name + " " + mode);
    EngineConfig fc = fixture_config(std::string(CYPRIS_FIXTURES_DIR) + "/models/" + name);
    fc.model.max_model_len = kLen;
    Engine reference(fc);
    Engine shifting(shift_config(fc, kLen, mode));
    const auto want = run_chats(reference, {chats[0]}, 4, true);
    EXPECT_EQ(run_chats(shifting, {chats[0]}, 4, true), want);
    EXPECT_EQ(shifting.stats().context_reuses_total, 0);
  }
}

TEST(ContextReuse, Stories260kStaysCloseToAFreshRunOnTheNewPrompt) {
  // Five layers: the moved tokens' values and later layers' keys saw the dropped messages, so the
  // continuation is not exactly a fresh run's. The stated tolerance (docs/context_shift.md): the
  // first reply token of each reused turn equals the fresh run's, and over the replies most tokens
  // until each reply's first difference are the fresh run's.
  constexpr int kLen = 256, kReply = 24;
  std::vector<Job> jobs = make_jobs(10, 7);
  std::vector<ChatTurns> chats(2);
  size_t next = 0;
  auto message = [&](size_t n) {
    auto m = jobs[next++].prompt;
    m.erase(m.begin());  // no BOS inside the chat
    while (m.size() < n) m.push_back(300 + int32_t(m.size()));
    m.resize(n);
    return m;
  };
  for (size_t c = 0; c < 2; ++c) {
    chats[c].system = {1, 400, 52, 290, 33, 70, 81, int32_t(12 + c)};
    chats[c].history = {message(40), message(40)};
    for (size_t t = 0; t < 3; ++t) chats[c].messages.push_back(message(20));
    chats[c].first_kept = {0, 1, 2};
  }
  EngineConfig cfg = stories_config();
  cfg.model.max_model_len = kLen;
  Engine engine(shift_config(cfg, kLen, "rotate"));
  std::vector<std::vector<int32_t>> prompts;
  const Outputs got = run_chats(engine, chats, kReply, false, &prompts);
  int64_t moved = 0;
  EXPECT_EQ(engine.stats().context_reused_tokens_total, expected_reuse(chats, kReply, &moved));
  // Each prompt on a fresh engine: the same prompts, as the replies are the engine's own.
  Engine plain(cfg);
  int agree = 0, total = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string id = "c" + std::to_string(i % 2) + "t" + std::to_string(i / 2);
    const auto want = run_requests(plain, {greedy(id, prompts[i], kReply)}).at(id);
    const auto& mine = got.at(id);
    if (i < 2) {
      EXPECT_EQ(mine, want) << id << ": the first turn reuses nothing";
      continue;
    }
    EXPECT_EQ(mine[0], want[0]) << id;
    size_t same = 0;
    while (same < want.size() && mine[same] == want[same]) ++same;
    agree += int(same);
    total += kReply;
  }
  EXPECT_GE(agree * 2, total) << agree << " of " << total;
}

TEST(ContextShift, RotationWithTensorParallelismGivesTheTpOneTokens) {
  // Each tensor-parallel rank moves and rotates its own KV heads: -tp 2 must give -tp 1's tokens,
  // for shifts inside a request and for reuse across requests.
  constexpr int kLen = 96;
  std::vector<Job> jobs = make_jobs(2, 99);
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < jobs.size(); ++i) {
    std::vector<int32_t> p = jobs[i].prompt;
    p.resize(std::min<size_t>(p.size(), 60));
    reqs.push_back(greedy("r" + std::to_string(i), p, 120));
  }
  auto chats = two_chats();
  Outputs want, want_chats;
  EngineStats one_stats;
  {
    Engine one(shift_config(stories_config(1), kLen, "rotate"));
    want = run_requests(one, reqs);
    EXPECT_GE(one.stats().num_context_shifts_total, 2);
    EXPECT_GT(one.stats().context_shift_moved_tokens_total, 0);
    want_chats = run_chats(one, chats, 8, false);
    one_stats = one.stats();
    EXPECT_GE(one_stats.context_reuses_total, 4);
    EXPECT_GT(one_stats.context_reuse_moved_tokens_total, 4 * kMinReuseRun);
  }
  Engine two(shift_config(stories_config(2), kLen, "rotate"));
  EXPECT_EQ(run_requests(two, reqs), want);
  EXPECT_EQ(run_chats(two, chats, 8, false), want_chats);
  EXPECT_EQ(two.stats().context_shift_moved_tokens_total, one_stats.context_shift_moved_tokens_total);
  EXPECT_EQ(two.stats().context_reuse_moved_tokens_total, one_stats.context_reuse_moved_tokens_total);
}

}  // namespace
}  // namespace cypris
