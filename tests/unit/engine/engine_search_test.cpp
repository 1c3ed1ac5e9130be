// Beam search and banned_strings through the whole engine on stories260k, each against a
// reference built from independent forward passes: every reference step is a fresh one-token
// request whose logprobs cover the whole vocabulary (stories260k has 512 tokens), so the reference
// never shares KV blocks, forks, rewinds or sampler state with the run under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"
#include "engine/sampling/beam_search.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/engine_jobs.h"

namespace cypris {
namespace {

using testing_support::stories_config;

constexpr int kVocab = 512;

EngineConfig full_logprobs_config() {
  EngineConfig cfg = stories_config();
  cfg.model.max_log_probs = kVocab;
  cfg.scheduler.max_num_seqs = 64;
  return cfg;
}

struct Result {
  std::map<int, std::string> text;
  std::map<int, std::vector<int32_t>> ids;
  std::map<int, std::vector<PositionLogprobs>> logprobs;
  std::map<int, std::string> reason;
  std::map<int, double> cumulative;
  std::optional<std::string> error;
  bool client_error = false;
  int64_t num_generated = 0;
  int num_outputs_with_data = 0;  // stream items that carried tokens
  bool finished = false;
};

Result collect(RequestStream& stream) {
  Result r;
  while (auto o = stream.next(std::chrono::milliseconds(0))) {
    for (const auto& d : o->outputs) {
      r.text[d.index] += d.text;
      r.ids[d.index].insert(r.ids[d.index].end(), d.token_ids.begin(), d.token_ids.end());
      r.logprobs[d.index].insert(r.logprobs[d.index].end(), d.logprobs.begin(), d.logprobs.end());
      if (d.finish_reason) r.reason[d.index] = *d.finish_reason;
      r.cumulative[d.index] = d.cumulative_logprob;
      if (!d.token_ids.empty()) ++r.num_outputs_with_data;
    }
    if (o->error) r.error = o->error;
    if (o->error) r.client_error = o->client_error;
    r.num_generated = o->num_generated_tokens;
    r.finished = o->finished;
  }
  return r;
}

Result run(Engine& engine, const std::vector<int32_t>& prompt, const SamplingParams& p, const std::string& id = "r") {
  auto stream = std::make_shared<RequestStream>(id);
  engine.add_request(GenerateRequest{id, prompt, "", std::make_shared<SamplingParams>(p), 0}, stream);
  while (engine.has_unfinished_requests()) engine.step();
  return collect(*stream);
}

// log_softmax of the raw logits after `context`, over the whole vocabulary, from a fresh request.
std::vector<double> next_logprobs(Engine& engine, const std::vector<int32_t>& context) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 1;
  p.ignore_eos = true;
  p.logprobs = kVocab;
  const Result r = run(engine, context, p, "ref");
  EXPECT_EQ(r.logprobs.at(0).size(), 1u);
  std::vector<double> lp(kVocab, -INFINITY);
  for (const auto& t : r.logprobs.at(0).front().top) lp[static_cast<size_t>(t.token_id)] = t.logprob;
  return lp;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ---------------------------------------------------------------------------------------------
// Beam search

TEST(EngineBeamSearch, TwoTokensEqualExhaustiveSearch) {
  // With max_tokens 2 and no EOS, beam search of width W returns the best two-token continuations
  // among the W best first tokens; checked against scoring all 512 x 512 continuations.
  Engine engine(full_logprobs_config());
  const std::vector<int32_t> prompt = {1, 403, 407, 261};  // BOS "Once upon a"
  const std::vector<double> first = next_logprobs(engine, prompt);
  struct Cand {
    double lp;
    int32_t t1, t2;
  };
  std::vector<Cand> all;
  for (int32_t t1 = 0; t1 < kVocab; ++t1) {
    const std::vector<double> second = next_logprobs(engine, concat(prompt, {t1}));
    for (int32_t t2 = 0; t2 < kVocab; ++t2) all.push_back({first[size_t(t1)] + second[size_t(t2)], t1, t2});
  }
  std::sort(all.begin(), all.end(), [](const Cand& a, const Cand& b) { return a.lp > b.lp; });

  SamplingParams p;
  p.use_beam_search = true;
  p.best_of = 16;
  p.n = 4;
  p.max_tokens = 2;
  p.ignore_eos = true;
  const Result r = run(engine, prompt, p);
  ASSERT_TRUE(r.finished);
  ASSERT_EQ(r.ids.size(), 4u);
  // Precondition for exactness: the best first tokens of the exhaustive top 4 are among the 16
  // most likely first tokens (true for any sensible model; checked, not assumed).
  std::vector<int32_t> order(kVocab);
  for (int32_t i = 0; i < kVocab; ++i) order[size_t(i)] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return first[size_t(a)] > first[size_t(b)]; });
  for (int i = 0; i < 4; ++i) {
    ASSERT_LT(std::find(order.begin(), order.end(), all[size_t(i)].t1) - order.begin(), 16);
    EXPECT_EQ(r.ids.at(i), (std::vector<int32_t>{all[size_t(i)].t1, all[size_t(i)].t2})) << "output " << i;
    EXPECT_NEAR(r.cumulative.at(i), all[size_t(i)].lp, 1e-4) << "output " << i;
    EXPECT_EQ(r.reason.at(i), "length");
  }
  EXPECT_EQ(r.num_outputs_with_data, 4);  // nothing streams before the search ends
  EXPECT_EQ(r.num_generated, 8);
}

// The same search driven by independent forward passes: BeamSearch fed with next_logprobs() of
// each running hypothesis as a fresh request.
std::vector<BeamHypothesis> reference_beam_search(Engine& ref, const std::vector<int32_t>& prompt,
                                                  const SamplingParams& p) {
  BeamSearch search(BeamSearchConfig::from_params(p, static_cast<int>(prompt.size()), 512, 2));
  while (!search.done()) {
    std::vector<float> rows;
    for (const auto& h : search.running()) {
      const auto lp = next_logprobs(ref, concat(prompt, h.tokens));
      rows.insert(rows.end(), lp.begin(), lp.end());
    }
    search.step(rows.data(), kVocab);
  }
  return search.best(p.n);
}

TEST(EngineBeamSearch, EqualsTheSearchOverIndependentForwardPasses) {
  Engine ref(full_logprobs_config());
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432};  // BOS "Once upon a time,"
  for (EarlyStopping es : {EarlyStopping::False, EarlyStopping::True, EarlyStopping::Never}) {
    SamplingParams p;
    p.use_beam_search = true;
    p.best_of = 3;
    p.n = 2;
    p.max_tokens = 16;
    p.stop_token_ids = {426};  // "." ends a hypothesis: finished ones compete with running ones
    p.early_stopping = es;
    p.length_penalty = 0.8f;
    const auto expected = reference_beam_search(ref, prompt, p);

    Engine engine(full_logprobs_config());
    const Result r = run(engine, prompt, p);
    ASSERT_TRUE(r.finished);
    ASSERT_EQ(expected.size(), 2u);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(r.ids.at(i), expected[size_t(i)].tokens) << "early_stopping " << int(es) << " output " << i;
      EXPECT_NEAR(r.cumulative.at(i), expected[size_t(i)].cum_logprob, 1e-3);
      EXPECT_EQ(r.text.at(i), engine.tokenizer()->decode(concat(prompt, r.ids.at(i))).substr(
                                  engine.tokenizer()->decode(prompt).size()));
    }
  }
}

TEST(EngineBeamSearch, SameResultUnderBatchingPreemptionAndChunkedPrefill) {
  // Beam requests next to greedy ones, with a KV cache too small for all of them (beams are
  // preempted and forks fall back to fresh requests) and chunked prefill, give what they give alone.
  const std::vector<std::vector<int32_t>> prompts = {{1, 403, 407, 261}, {1, 385, 328}, {1, 291, 317, 261}};
  SamplingParams beam;
  beam.use_beam_search = true;
  beam.best_of = 4;
  beam.n = 2;
  beam.max_tokens = 24;
  beam.ignore_eos = true;
  beam.logprobs = 2;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = 40;
  greedy.ignore_eos = true;

  std::vector<Result> solo;
  {
    Engine engine(stories_config());
    for (const auto& pr : prompts) solo.push_back(run(engine, pr, beam));
    for (const auto& pr : prompts) solo.push_back(run(engine, pr, greedy));
  }
  EngineConfig cfg = stories_config();
  cfg.cache.num_gpu_blocks_override = 12;  // 192 tokens for 3 x 4 beams + 3 greedy requests
  cfg.cache.enable_prefix_caching = true;
  cfg.scheduler.enable_chunked_prefill = true;
  cfg.scheduler.max_num_batched_tokens = 8;
  cfg.scheduler.max_num_seqs = 6;
  Engine engine(cfg);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < 2 * prompts.size(); ++i) {
    const std::string id = "q" + std::to_string(i);
    streams.push_back(std::make_shared<RequestStream>(id));
    const bool is_beam = i < prompts.size();
    engine.add_request(GenerateRequest{id, prompts[i % prompts.size()], "",
                                       std::make_shared<SamplingParams>(is_beam ? beam : greedy), 0},
                       streams.back());
  }
  for (int steps = 0; engine.has_unfinished_requests(); ++steps) {
    ASSERT_LT(steps, 20000) << "the engine does not finish";
    engine.step();
  }
  EXPECT_GT(engine.stats().num_preemptions_total, 0) << "the cache was meant to be too small";
  for (size_t i = 0; i < streams.size(); ++i) {
    const Result r = collect(*streams[i]);
    ASSERT_TRUE(r.finished) << i;
    ASSERT_FALSE(r.error) << *r.error;
    EXPECT_EQ(r.ids, solo[i].ids) << "request " << i;
    EXPECT_EQ(r.text, solo[i].text) << "request " << i;
    if (i >= prompts.size()) continue;  // the greedy requests asked for no logprobs
    for (const auto& [index, lps] : r.logprobs) {
      ASSERT_EQ(lps.size(), r.ids.at(index).size());
      for (size_t k = 0; k < lps.size(); ++k) EXPECT_NEAR(lps[k].logprob, solo[i].logprobs.at(index)[k].logprob, 1e-4);
    }
  }
}

TEST(EngineBeamSearch, LogprobsAreThoseOfTheRawLogitsAndSumToTheCumulative) {
  Engine engine(full_logprobs_config());
  const std::vector<int32_t> prompt = {1, 385, 328};  // BOS "One day"
  SamplingParams p;
  p.use_beam_search = true;
  p.best_of = 2;
  p.max_tokens = 6;
  p.ignore_eos = true;
  p.logprobs = 3;
  const Result r = run(engine, prompt, p);
  const auto& ids = r.ids.at(0);
  const auto& lps = r.logprobs.at(0);
  ASSERT_EQ(lps.size(), ids.size());
  double sum = 0.0;
  for (size_t k = 0; k < ids.size(); ++k) {
    const auto ref = next_logprobs(engine, concat(prompt, std::vector<int32_t>(ids.begin(), ids.begin() + long(k))));
    EXPECT_EQ(lps[k].token_id, ids[k]);
    EXPECT_NEAR(lps[k].logprob, ref[size_t(ids[k])], 1e-4);
    EXPECT_EQ(lps[k].top.size(), 3u);
    sum += lps[k].logprob;
  }
  EXPECT_NEAR(sum, r.cumulative.at(0), 1e-3);  // no penalties: the ranking logprobs are the raw ones
}

TEST(EngineBeamSearch, RefusesWhatItCannotDo) {
  EngineConfig cfg = stories_config();
  cfg.scheduler.max_num_seqs = 4;
  Engine engine(cfg);
  SamplingParams p;
  p.use_beam_search = true;
  p.best_of = 8;
  p.max_tokens = 4;
  auto stream = std::make_shared<RequestStream>("x");
  try {
    engine.add_request(GenerateRequest{"x", {1}, "", std::make_shared<SamplingParams>(p), 0}, stream);
    FAIL() << "beam width above --max-num-seqs was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-num-seqs"), std::string::npos) << e.what();
  }
  p.best_of = 2;
  p.banned_strings = {"Lily"};
  try {
    engine.add_request(GenerateRequest{"y", {1}, "", std::make_shared<SamplingParams>(p), 0}, stream);
    FAIL() << "banned_strings with beam search was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("banned_strings"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(engine.has_unfinished_requests());
}

// ---------------------------------------------------------------------------------------------
// banned_strings

// Greedy decoding with banned phrases by brute force: each token is the most likely one not
// banned at its position (a fresh full-vocabulary request per token); after each token the whole
// output is decoded and searched; a phrase that appeared rewinds the output to the token holding
// its first byte and bans that token there. Bans at later positions are forgotten on a rewind.
std::vector<int32_t> reference_banned_greedy(Engine& ref, const std::vector<int32_t>& prompt,
                                             const std::vector<std::string>& phrases, size_t max_tokens) {
  const Tokenizer& tok = *ref.tokenizer();
  const size_t base = tok.decode(prompt).size();
  std::vector<int32_t> out;
  std::map<size_t, std::set<int32_t>> bans;
  for (int guard = 0; out.size() < max_tokens; ++guard) {
    EXPECT_LT(guard, 5000);
    if (guard >= 5000) break;
    const auto lp = next_logprobs(ref, concat(prompt, out));
    int32_t best = -1;
    for (int32_t t = 0; t < kVocab; ++t) {
      if (bans[out.size()].count(t)) continue;
      if (best < 0 || lp[size_t(t)] > lp[size_t(best)]) best = t;
    }
    out.push_back(best);
    const std::string text = tok.decode(concat(prompt, out)).substr(base);
    size_t start = std::string::npos;
    for (const auto& ph : phrases) start = std::min(start, text.find(ph));
    if (start == std::string::npos) continue;
    size_t i = 0;  // the token holding byte `start`
    while (tok.decode(concat(prompt, std::vector<int32_t>(out.begin(), out.begin() + long(i) + 1))).size() - base <=
           start) {
      ++i;
    }
    bans.erase(bans.upper_bound(i), bans.end());
    bans[i].insert(out[i]);
    out.resize(i);
  }
  return out;
}

TEST(EngineBannedStrings, GreedyOutputEqualsTheBruteForceReference) {
  Engine ref(full_logprobs_config());
  const std::vector<int32_t> prompt = {1};
  const std::vector<std::string> phrases = {"Lily", "park", "little girl"};
  const auto expected = reference_banned_greedy(ref, prompt, phrases, 80);

  Engine engine(stories_config());
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 80;
  p.ignore_eos = true;
  p.logprobs = 1;
  p.banned_strings = phrases;
  const Result r = run(engine, prompt, p);
  ASSERT_TRUE(r.finished);
  ASSERT_FALSE(r.error);
  EXPECT_EQ(r.ids.at(0), expected);
  EXPECT_EQ(r.reason.at(0), "length");
  EXPECT_EQ(r.num_generated, 80);
  ASSERT_EQ(r.logprobs.at(0).size(), r.ids.at(0).size());
  for (size_t k = 0; k < r.ids.at(0).size(); ++k) EXPECT_EQ(r.logprobs.at(0)[k].token_id, r.ids.at(0)[k]);
  // What streamed is the text of what was kept, and no phrase ever reached the client.
  EXPECT_EQ(r.text.at(0), engine.tokenizer()->decode(concat(prompt, r.ids.at(0))));
  for (const auto& ph : phrases) EXPECT_EQ(r.text.at(0).find(ph), std::string::npos) << ph;
  // Without bans the story names Lily in the first sentence: the bans did something.
  EXPECT_NE(engine.tokenizer()->decode(concat(prompt, expected)).substr(0, 48),
            "Once upon a time, there was a little girl named ");
}

TEST(EngineBannedStrings, RandomPhraseSetsAgreeWithTheBruteForceReference) {
  // Phrases cut at random from the unbanned story (so they would appear), over several seeds,
  // with several requests sharing the engine and its prefix cache: each equals the reference.
  EngineConfig cfg = stories_config();
  cfg.cache.enable_prefix_caching = true;
  Engine engine(cfg);
  Engine ref(full_logprobs_config());
  SamplingParams plain;
  plain.temperature = 0.0f;
  plain.max_tokens = 50;
  plain.ignore_eos = true;
  const std::string story = run(engine, {1}, plain).text.at(0);
  std::mt19937 rng(7);
  std::vector<std::vector<std::string>> sets;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int k = 0; k < 5; ++k) {
    std::vector<std::string> phrases;
    const int count = 1 + int(rng() % 4);
    for (int i = 0; i < count; ++i) {
      const size_t len = 1 + rng() % 6;
      phrases.push_back(story.substr(rng() % (story.size() - len), len));
    }
    SamplingParams p = plain;
    p.banned_strings = phrases;
    sets.push_back(phrases);
    const std::string id = "b" + std::to_string(k);
    streams.push_back(std::make_shared<RequestStream>(id));
    engine.add_request(GenerateRequest{id, {1}, "", std::make_shared<SamplingParams>(p), 0}, streams.back());
  }
  while (engine.has_unfinished_requests()) engine.step();
  for (size_t k = 0; k < sets.size(); ++k) {
    const Result r = collect(*streams[k]);
    std::string shown;
    for (const auto& ph : sets[k]) shown += "[" + ph + "]";
    ASSERT_TRUE(r.finished) << shown;
    if (r.error) {  // a phrase like " " can make every continuation impossible: then it says so
      EXPECT_NE(r.error->find("banned_strings"), std::string::npos) << *r.error;
      continue;
    }
    EXPECT_EQ(r.ids.at(0), reference_banned_greedy(ref, {1}, sets[k], 50)) << shown;
    for (const auto& ph : sets[k]) EXPECT_EQ(r.text.at(0).find(ph), std::string::npos) << shown;
  }
}

TEST(EngineBannedStrings, StopStringsAndStreamingSeeOnlyKeptText) {
  EngineConfig cfg = stories_config();
  cfg.cache.enable_prefix_caching = true;  // rewound blocks must not poison the prefix cache
  Engine engine(cfg);
  SamplingParams plain;
  plain.temperature = 0.0f;
  plain.max_tokens = 60;
  plain.ignore_eos = true;
  const Result before = run(engine, {1}, plain);

  SamplingParams p = plain;
  p.banned_strings = {"Lily"};
  p.stop = {"toys"};
  p.n = 2;
  auto stream = std::make_shared<RequestStream>("s");
  engine.add_request(GenerateRequest{"s", {1}, "", std::make_shared<SamplingParams>(p), 0}, stream);
  std::map<int, std::string> streamed;
  std::map<int, std::string> reason;
  while (engine.has_unfinished_requests()) {
    engine.step();
    while (auto o = stream->next(std::chrono::milliseconds(0))) {
      for (const auto& d : o->outputs) {
        streamed[d.index] += d.text;
        if (d.finish_reason) reason[d.index] = *d.finish_reason;
      }
    }
    for (const auto& [i, text] : streamed) EXPECT_EQ(text.find("Lily"), std::string::npos) << text;
  }
  // The stop string ends the kept text where the brute-force reference's text has it.
  Engine ref(full_logprobs_config());
  const auto ids = reference_banned_greedy(ref, {1}, {"Lily"}, 60);
  const std::string text = ref.tokenizer()->decode(concat({1}, ids));
  ASSERT_NE(text.find("toys"), std::string::npos) << "the reference story should mention toys: " << text;
  for (int i : {0, 1}) {
    EXPECT_EQ(streamed[i], text.substr(0, text.find("toys")));
    EXPECT_EQ(reason[i], "stop");
  }
  // The prefix cache still serves the original story afterwards.
  const Result after = run(engine, {1}, plain);
  EXPECT_EQ(after.ids, before.ids);
}

TEST(EngineBannedStrings, EveryRewindWithinTheLengthLimitKeepsMaxTokens) {
  // A phrase made of a very common byte: many rewinds, some completing at the last allowed token.
  Engine engine(stories_config());
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 30;
  p.ignore_eos = true;
  p.banned_strings = {"e"};
  const Result r = run(engine, {1}, p);
  ASSERT_TRUE(r.finished);
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_EQ(r.ids.at(0).size(), 30u);
  EXPECT_GT(r.text.at(0).size(), 30u);
  EXPECT_EQ(r.text.at(0).find('e'), std::string::npos) << r.text.at(0);
}

// issue #26 item 5: phrases no continuation avoids answered 500 (an engine fault) after 4096
// rewinds. Here every byte is banned and the request allows only 40 word pieces (all show text):
// each is tried at the first position, rewound and banned there; once all are, the request ends at
// once, as the client's error, after no more steps than allowed tokens.
TEST(EngineBannedStrings, PhrasesNothingAvoidsEndAsTheClientsErrorOnceEveryTokenIsBanned) {
  Engine engine(stories_config());
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 20;
  p.ignore_eos = true;
  for (int b = 0; b < 256; ++b) p.banned_strings.push_back(std::string(1, static_cast<char>(b)));
  std::vector<int32_t> allowed;
  for (int32_t id = 300; id < 340; ++id) allowed.push_back(id);  // word pieces of stories260k
  p.allowed_token_ids = allowed;
  auto stream = std::make_shared<RequestStream>("all");
  engine.add_request(GenerateRequest{"all", {1}, "", std::make_shared<SamplingParams>(p), 0}, stream);
  int steps = 0;
  while (engine.has_unfinished_requests() && steps <= 4200) {
    engine.step();
    ++steps;
  }
  EXPECT_LE(steps, static_cast<int>(allowed.size()) + 1);
  const Result r = collect(*stream);
  ASSERT_TRUE(r.finished);
  ASSERT_TRUE(r.error.has_value()) << ::testing::PrintToString(r.ids) << " steps " << steps;
  EXPECT_TRUE(r.client_error) << *r.error;
  EXPECT_EQ(r.error->rfind("banned_strings", 0), 0u) << *r.error;
  EXPECT_NE(r.error->find("position 0"), std::string::npos) << *r.error;
  EXPECT_TRUE(r.text.empty() || r.text.at(0).empty()) << r.text.at(0);
}

}  // namespace
}  // namespace cypris
