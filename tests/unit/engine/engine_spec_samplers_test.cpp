// Speculative decoding with the samplers that carry state from one position to the next, through
// the whole engine on stories260k, against the same engine without speculation:
//  - guided decoding: each verified position is masked by the grammar after the drafts before it,
//    a draft the grammar rejects ends the run; greedy and seeded outputs equal token for token
//    (JSON schema, regex, choice), and a draft model's verified tokens keep the masked
//    distribution (chi-square over seeds);
//  - banned_strings: a phrase completed inside a verified run ends the run there and rewinds to
//    where it began, as without drafts (greedy and seeded outputs equal, phrases from inside the
//    unbanned text);
//  - Mirostat 2: each verified position is drawn with the mu it would have had after the drafts
//    before it (seeded outputs equal, alone and with the other samplers that see the history), and
//    after a draft model's residual draw mu is the emitted token's update (against a reference over
//    the target's logprobs);
// Every test also checks that drafts were proposed, accepted and rejected, or it would compare nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"
#include "engine/sampling/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/engine_jobs.h"
#include "tests/support/full_runs.h"
#include "tests/support/same_distribution.h"

namespace cypris {
namespace {

using namespace testing_support;

EngineConfig ngram_config(int k = 4, int max_n = 2) {
  EngineConfig cfg = stories_config();
  cfg.spec.speculative_model = "[ngram]";
  cfg.spec.num_speculative_tokens = k;
  cfg.spec.ngram_prompt_lookup_max = max_n;
  return cfg;
}

void expect_equal_results(const std::vector<GenerateRequest>& reqs, const std::map<std::string, FullResult>& want,
                          const std::map<std::string, FullResult>& got) {
  for (const auto& r : reqs) {
    const FullResult& w = want.at(r.request_id);
    const FullResult& g = got.at(r.request_id);
    EXPECT_EQ(g.tokens, w.tokens) << r.request_id;
    EXPECT_EQ(g.text, w.text) << r.request_id;
    EXPECT_EQ(g.finish_reason, w.finish_reason) << r.request_id;
  }
}

// stories260k's greedy story from BOS: its text, for prompts whose answer repeats it (prompt
// lookup then proposes what the grammar and the model go on to write).
std::string greedy_story_text(int tokens) {
  Engine engine(stories_config());
  SamplingParams g;
  g.temperature = 0.0f;
  g.max_tokens = tokens;
  g.ignore_eos = true;
  return run_full(engine, {make_request("story", {1}, g)}).at("story").text;
}

std::vector<int32_t> encode_prompt(const std::string& text) {
  Engine engine(stories_config());
  std::vector<int32_t> ids = {1};
  const std::vector<int32_t> t = engine.tokenizer()->encode(text, /*add_special_tokens=*/false);
  ids.insert(ids.end(), t.begin(), t.end());
  return ids;
}

// Guided requests of every front end whose prompts hold text the grammar lets the model repeat
// (accepted drafts) and text it forbids (drafts the grammar rejects).
std::vector<GenerateRequest> guided_requests(const SamplingParams& base) {
  const std::string story = greedy_story_text(80);
  std::vector<GenerateRequest> reqs;
  auto add = [&](const std::string& id, const std::string& prompt, GuidedKind kind, const std::string& text,
                 std::vector<std::string> choices = {}) {
    SamplingParams p = base;
    p.guided.kind = kind;
    p.guided.text = text;
    p.guided.choices = std::move(choices);
    reqs.push_back(make_request(id, encode_prompt(prompt), p));
  };
  const std::string schema = R"({"type":"object","properties":{"story":{"type":"string"}},"required":["story"]})";
  add("json", nlohmann::json{{"story", story}}.dump() + "\n", GuidedKind::JsonSchema, schema);
  add("json-free", story + "\n" + story, GuidedKind::JsonSchema, schema);
  add("regex", story + "\n", GuidedKind::Regex,
      R"(Once upon a time, there was a (little|big) (girl|boy|dog) named [A-Z][a-z]+\.( [A-Z][a-z ,']+\.){1,3})");
  // The prompt says "a little girl named Lily": lookup proposes it, the grammar refuses it.
  add("regex-refuses", story + "\n", GuidedKind::Regex,
      R"(Once upon a time, there was a big dog named Max\. [A-Z][a-z ,']+\.( [A-Z][a-z ,']+\.)?)");
  const size_t dot = story.find('.');
  const std::string first = story.substr(0, dot + 1);
  add("choice", story + "\n" + first + "\n", GuidedKind::Choice, "",
      {first, first.substr(0, first.size() / 2) + " and a cat.", "The end."});
  return reqs;
}

TEST(SpecGuided, GreedyOutputsEqualWithoutSpeculation) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 90;
  const std::vector<GenerateRequest> reqs = guided_requests(p);
  Engine plain(stories_config());
  const auto want = run_full(plain, reqs);
  Engine spec(ngram_config());
  const auto got = run_full(spec, reqs);
  expect_equal_results(reqs, want, got);
  EXPECT_EQ(want.at("choice").finish_reason, "stop");
  EXPECT_EQ(want.at("regex-refuses").text.rfind("Once upon a time, there was a big dog named Max.", 0), 0u)
      << want.at("regex-refuses").text;
  expect_speculated(spec);
  // Alone too: the drafts then do not depend on batch-mates.
  for (const auto& r : reqs) {
    Engine solo(ngram_config(6, 3));
    const auto one = run_full(solo, {r});
    EXPECT_EQ(one.at(r.request_id).tokens, want.at(r.request_id).tokens) << r.request_id;
  }
}

TEST(SpecGuided, SeededSampledOutputsEqualWithoutSpeculation) {
  // Prompt lookup's drafts are a point mass: a verified position keeps its draft when the draw
  // there (the request's Philox stream at that output position, under that position's mask)
  // equals it, so seeded outputs are the tokens of the run without speculation.
  std::vector<GenerateRequest> reqs;
  for (int seed = 0; seed < 4; ++seed) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_p = 0.9f;
    p.seed = 100 + seed;
    p.max_tokens = 90;
    for (GenerateRequest r : guided_requests(p)) {
      r.request_id += "-s" + std::to_string(seed);
      reqs.push_back(std::move(r));
    }
  }
  Engine plain(stories_config());
  const auto want = run_full(plain, reqs);
  Engine spec(ngram_config());
  const auto got = run_full(spec, reqs);
  expect_equal_results(reqs, want, got);
  expect_speculated(spec);
}

TEST(SpecGuided, DraftModelKeepsTheMaskedDistributionOverSeeds) {
  // A random-weight draft with stories260k's vocabulary drafts without the grammar: most drafts are
  // refused by the mask or by min(1, p/q), and the residual max(0, p - q) of the masked p decides.
  // Output positions 1 and 2 are verified positions; over many seeds their tokens must have the
  // distribution they have without the draft, and stay inside the grammar.
  const std::vector<int32_t> prompt = {1, 403, 261, 340, 385, 261, 442, 270, 300};
  std::vector<GenerateRequest> reqs;
  for (int seed = 0; seed < 1000; ++seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    p.max_tokens = 4;
    p.ignore_eos = true;
    p.guided.kind = GuidedKind::Regex;
    p.guided.text = "( [a-z]+)+";
    reqs.push_back(make_request("s" + std::to_string(seed), prompt, p));
  }
  EngineConfig cfg = stories_config();
  cfg.scheduler.max_num_seqs = 256;
  Engine plain(cfg);
  const auto want = run_full(plain, reqs);
  cfg.spec.speculative_model = std::string(CYPRIS_TESTDATA_DIR) + "/gguf/tiny-random-Q8_0.gguf";
  cfg.spec.num_speculative_tokens = 2;
  Engine spec(cfg);
  const auto got = run_full(spec, reqs);
  expect_speculated(spec);
  test::expect_same_distribution_at(tokens_of(got), tokens_of(want), {1, 2}, 4, 4);
}

// Greedy jobs whose outputs are long enough for stories260k to repeat itself (and lookup to match).
std::vector<Job> long_jobs(int count, uint32_t seed) {
  return make_long_jobs(count, seed, 200, 40, 60);
}

// Each step's delta (tokens and text) per request.
struct Delta {
  std::vector<int32_t> tokens;
  std::string text;
};
std::map<std::string, std::vector<Delta>> run_deltas(Engine& engine, const std::vector<GenerateRequest>& reqs) {
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) {
    streams[r.request_id] = std::make_shared<RequestStream>(r.request_id);
    engine.add_request(r, streams[r.request_id]);
  }
  std::map<std::string, std::vector<Delta>> out;
  for (int step = 0; engine.has_unfinished_requests() && step < 100000; ++step) {
    engine.step();
    for (auto& [id, st] : streams) {
      while (auto o = st->next(std::chrono::milliseconds(0))) {
        for (const auto& d : o->outputs) out[id].push_back(Delta{d.token_ids, d.text});
      }
    }
  }
  return out;
}

// Requests whose banned phrases are completed inside a verified run: with speculation and
// without bans, a step that emits at least 4 tokens t0 t1 t2 t3... gives the phrase "t1 t2" (new
// in the output so far), which the banned run then completes at t2, before the run's last token.
// The prompts hold stories260k's greedy story and then its first words again, so the answer
// retells it and prompt lookup drafts from the prompt.
std::vector<GenerateRequest> banned_requests(const SamplingParams& base) {
  Engine greedy(stories_config());
  SamplingParams g;
  g.temperature = 0.0f;
  g.max_tokens = 100;
  g.ignore_eos = true;
  const std::vector<int32_t> story = run_full(greedy, {make_request("story", {1}, g)}).at("story").tokens;
  std::vector<GenerateRequest> plain;
  for (int cut : {3, 6, 10, 15, 20, 25, 30, 40}) {
    std::vector<int32_t> prompt = {1};
    prompt.insert(prompt.end(), story.begin(), story.end());
    prompt.insert(prompt.end(), story.begin(), story.begin() + cut);
    SamplingParams p = base;
    p.max_tokens = 80;
    p.ignore_eos = true;
    plain.push_back(make_request("retell" + std::to_string(cut), prompt, p));
  }
  Engine engine(ngram_config(6, 2));
  const auto deltas = run_deltas(engine, plain);
  auto piece = [&](int32_t id) {
    std::string t = engine.tokenizer()->id_to_piece(id);
    for (size_t at; (at = t.find("\xe2\x96\x81")) != std::string::npos;) t.replace(at, 3, " ");
    return t;
  };
  std::vector<GenerateRequest> reqs;
  for (const GenerateRequest& r : plain) {
    std::string before;
    std::vector<std::string> phrases;
    for (const Delta& d : deltas.at(r.request_id)) {
      if (d.tokens.size() >= 4 && phrases.size() < 2) {
        const std::string phrase = piece(d.tokens[1]) + piece(d.tokens[2]);
        if (phrase.size() >= 3 && phrase.find('<') == std::string::npos &&
            (before + d.text).find(phrase) == before.size() + d.text.find(phrase) &&
            before.find(phrase) == std::string::npos && d.text.find(phrase) != std::string::npos) {
          phrases.push_back(phrase);
        }
      }
      before += d.text;
    }
    if (phrases.empty()) continue;
    SamplingParams p = *r.params;
    p.banned_strings = phrases;
    reqs.push_back(make_request(r.request_id + "-banned", r.prompt_token_ids, p));
  }
  EXPECT_GE(reqs.size(), 4u) << "too few verified runs of 4 tokens to ban inside";
  return reqs;
}

TEST(SpecBanned, GreedyOutputsEqualWithoutSpeculation) {
  SamplingParams p;
  p.temperature = 0.0f;
  const std::vector<GenerateRequest> reqs = banned_requests(p);
  Engine plain(stories_config());
  const auto want = run_full(plain, reqs);
  Engine spec(ngram_config(6, 2));
  const auto got = run_full(spec, reqs);
  expect_equal_results(reqs, want, got);
  for (const auto& r : reqs) {
    for (const std::string& b : r.params->banned_strings) {
      EXPECT_EQ(want.at(r.request_id).text.find(b), std::string::npos) << r.request_id << " has '" << b << "'";
    }
  }
  expect_speculated(spec);
}

TEST(SpecBanned, SeededSampledOutputsEqualWithoutSpeculation) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 20;
  p.seed = 4242;
  const std::vector<GenerateRequest> reqs = banned_requests(p);
  Engine plain(stories_config());
  const auto want = run_full(plain, reqs);
  Engine spec(ngram_config(6, 2));
  const auto got = run_full(spec, reqs);
  expect_equal_results(reqs, want, got);
  expect_speculated(spec);
}

TEST(SpecMirostat, SeededOutputsEqualWithoutSpeculation) {
  // mu after a drafted position follows from the target's row there and the draft, so each row
  // draws from the Philox stream at its output position with the mu and history it would have
  // had: the tokens are those of the run without speculation, for any tau and eta.
  const std::vector<Job> jobs = long_jobs(6, 9);
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < jobs.size(); ++i) {
    for (int v = 0; v < 3; ++v) {
      SamplingParams p;
      p.temperature = 1.0f;
      p.mirostat_mode = 2;
      p.mirostat_tau = v == 0 ? 2.0f : v == 1 ? 4.0f : 1.0f;
      p.mirostat_eta = v == 2 ? 0.5f : 0.1f;
      if (v == 2) p.repetition_penalty = 1.1f;
      p.seed = 300 + static_cast<int>(i) * 7 + v;
      p.max_tokens = 64;
      p.ignore_eos = true;
      reqs.push_back(make_request(jobs[i].id + "-m" + std::to_string(v), jobs[i].prompt, p));
    }
  }
  Engine plain(stories_config());
  const auto want = run_full(plain, reqs);
  Engine spec(ngram_config(4, 2));
  const auto got = run_full(spec, reqs);
  expect_equal_results(reqs, want, got);
  expect_speculated(spec);
}

TEST(SpecMirostat, GuidedAndBannedTogetherEqualWithoutSpeculation) {
  // Every stateful sampler at once: the grammar's mask, banned phrases and Mirostat's mu.
  SamplingParams p;
  p.temperature = 1.0f;
  p.mirostat_mode = 2;
  p.mirostat_tau = 3.0f;
  p.seed = 77;
  p.max_tokens = 90;
  std::vector<GenerateRequest> reqs = guided_requests(p);
  for (GenerateRequest& r : banned_requests(p)) reqs.push_back(std::move(r));
  for (size_t i = 0; i < 3; ++i) {
    SamplingParams q = *reqs[i].params;
    q.banned_strings = {" the", "ing"};
    reqs.push_back(make_request(reqs[i].request_id + "-banned", reqs[i].prompt_token_ids, q));
  }
  Engine plain(stories_config());
  const auto want = run_full(plain, reqs);
  Engine spec(ngram_config(6, 2));
  const auto got = run_full(spec, reqs);
  expect_equal_results(reqs, want, got);
  expect_speculated(spec);
}

TEST(SpecMirostat, DraftModelKeepsTheTargetDistributionOverSeeds) {
  // A random draft: most drafts are rejected and the residual decides, after which mu must be
  // the one the emitted token gives, not the row's own draw's. Positions 1 and 2 are verified in
  // one step, position 3 is drawn the next step with the mu the verification left.
  const std::vector<int32_t> prompt = {1, 403, 261, 340, 385, 261, 442, 270, 300};
  std::vector<GenerateRequest> reqs;
  for (int seed = 0; seed < 1000; ++seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.mirostat_mode = 2;
    p.mirostat_tau = 4.0f;
    p.mirostat_eta = 3.0f;
    p.seed = seed;
    p.max_tokens = 4;
    p.ignore_eos = true;
    reqs.push_back(make_request("s" + std::to_string(seed), prompt, p));
  }
  EngineConfig cfg = stories_config();
  cfg.scheduler.max_num_seqs = 256;
  Engine plain(cfg);
  const auto want = run_full(plain, reqs);
  cfg.spec.speculative_model = std::string(CYPRIS_TESTDATA_DIR) + "/gguf/tiny-random-Q8_0.gguf";
  cfg.spec.num_speculative_tokens = 2;
  Engine spec(cfg);
  const auto got = run_full(spec, reqs);
  expect_speculated(spec);
  test::expect_same_distribution_at(tokens_of(got), tokens_of(want), {1, 2, 3}, 4, 4);
}

TEST(SpecMirostat, MuAfterAResidualDrawIsTheEmittedTokensUpdate) {
  // A random draft under Mirostat 2 at temperature 1: nearly every verification rejects a draft
  // and emits a draw from the residual max(0, p - q), a token that is never the rejected draft and
  // often not the row's own draw. Whatever was emitted, each request's mu after a step must be the
  // one Mirostat reaches without speculation over the same tokens: mu_0 = 2 tau, and for each
  // emitted token t, mu <- mu - eta (-log2 p(t) - tau), p the target's distribution at t's position
  // (temperature 1, nothing else: the softmax of its logits). The reference reads p(t) as the
  // target's prompt logprobs of the emitted text, from the target alone. Updating mu with the
  // draft's token, or with the row's own draw, after a residual draw fails here, while the
  // tokens alone (DraftModelKeepsTheTargetDistributionOverSeeds) are too coarse to show it.
  const std::vector<int32_t> prompt = {1, 403, 261, 340, 385, 261, 442, 270, 300};
  constexpr float kTau = 3.0f, kEta = 0.5f;
  std::vector<GenerateRequest> reqs;
  for (int seed = 0; seed < 48; ++seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.mirostat_mode = 2;
    p.mirostat_tau = kTau;
    p.mirostat_eta = kEta;
    p.seed = 900 + seed;
    p.max_tokens = 14;
    p.ignore_eos = true;
    reqs.push_back(make_request("m" + std::to_string(seed), prompt, p));
  }
  EngineConfig cfg = stories_config();
  cfg.scheduler.max_num_seqs = 64;
  cfg.spec.speculative_model = std::string(CYPRIS_TESTDATA_DIR) + "/gguf/tiny-random-Q8_0.gguf";
  cfg.spec.num_speculative_tokens = 3;
  Engine spec(cfg);
  // Each running request's (tokens emitted so far, mu) after every step.
  std::map<std::string, std::vector<std::pair<size_t, float>>> seen;
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) {
    streams[r.request_id] = std::make_shared<RequestStream>(r.request_id);
    spec.add_request(r, streams[r.request_id]);
  }
  std::map<std::string, std::vector<int32_t>> tokens;
  for (int step = 0; spec.has_unfinished_requests() && step < 1000; ++step) {
    spec.step();
    for (const auto& r : reqs) {
      if (const SamplingState* st = spec.sampling_state(r.request_id); st && !st->output_ids().empty()) {
        seen[r.request_id].emplace_back(st->output_ids().size(), st->mirostat_mu());
      }
      while (auto o = streams[r.request_id]->next(std::chrono::milliseconds(0))) {
        ASSERT_FALSE(o->error.has_value()) << *o->error;
        for (const auto& d : o->outputs) {
          tokens[r.request_id].insert(tokens[r.request_id].end(), d.token_ids.begin(), d.token_ids.end());
        }
      }
    }
  }
  ASSERT_FALSE(spec.has_unfinished_requests());
  expect_speculated(spec);
  const EngineStats st = spec.stats();
  EXPECT_LT(double(st.spec_accepted_tokens_total), 0.5 * double(st.spec_draft_tokens_total))
      << "the draft agrees too well: few residual draws";

  // The reference: p(t) of every emitted token from the target alone.
  std::vector<GenerateRequest> replays;
  for (const auto& r : reqs) {
    std::vector<int32_t> text = prompt;
    const auto& t = tokens.at(r.request_id);
    ASSERT_EQ(t.size(), 14u) << r.request_id;
    text.insert(text.end(), t.begin(), t.end());
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = 1;
    p.prompt_logprobs = 1;
    replays.push_back(make_request(r.request_id, text, p));
  }
  Engine plain(stories_config());
  const auto ref = run_full(plain, replays);
  int checked = 0;
  for (const auto& r : reqs) {
    const FullResult& f = ref.at(r.request_id);
    ASSERT_EQ(f.prompt_logprobs.size(), prompt.size() - 1 + 14);
    std::vector<double> mu_after = {2.0 * kTau};  // mu_after[m]: after m emitted tokens
    for (size_t i = 0; i < 14; ++i) {
      const PositionLogprobs& lp = f.prompt_logprobs[prompt.size() - 1 + i];
      ASSERT_EQ(lp.token_id, tokens.at(r.request_id)[i]);
      const double surprise = -double(lp.logprob) / std::log(2.0);
      mu_after.push_back(mu_after.back() - kEta * (surprise - kTau));
    }
    for (const auto& [m, mu] : seen[r.request_id]) {
      ASSERT_LE(m, 14u);
      EXPECT_NEAR(mu, mu_after[m], 1e-3) << r.request_id << " after " << m << " tokens";
      ++checked;
    }
  }
  EXPECT_GT(checked, 150);
}

}  // namespace
}  // namespace cypris
