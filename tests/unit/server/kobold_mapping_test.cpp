#include "app/server/kobold/kobold_mapping.h"

#include <gtest/gtest.h>

#include "app/server/errors.h"
#include "tests/support/fake_tokenizer.h"

using namespace cypris;
using namespace cypris::server;
using nlohmann::json;

TEST(KoboldMapping, SillyTavernClassicBody) {
  auto r = kobold_request_from_json(json::parse(R"({"prompt":"Hi","use_story":false,"max_context_length":8192,
    "max_length":200,"rep_pen":1.1,"rep_pen_range":1024,"rep_pen_slope":0.9,"temperature":0.7,"tfs":1,"top_a":0,
    "top_k":0,"top_p":0.9,"min_p":0.05,"typical":1,"sampler_order":[6,0,1,3,4,2,5],"singleline":false,
    "use_default_badwordsids":true,"mirostat":0,"grammar":"","stop_sequence":["\nUser:"],"sampler_seed":7,
    "eps_cutoff":3,"genkey":"KCPP1234","banned_tokens":["Lily","said"]})"),
                                    256, 4096);
  EXPECT_EQ(r.prompt, "Hi");
  EXPECT_EQ(r.genkey, "KCPP1234");
  EXPECT_EQ(r.max_context_length, 8192);
  EXPECT_EQ(r.max_length, 200);
  EXPECT_TRUE(r.use_default_badwordsids);
  const SamplingParams& p = r.params;
  EXPECT_EQ(p.max_tokens, 200);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.1f);
  EXPECT_FLOAT_EQ(p.temperature, 0.7f);
  EXPECT_EQ(p.top_k, -1);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.typical_p, 1.0f);
  EXPECT_FLOAT_EQ(p.epsilon_cutoff, 3.0f);
  EXPECT_EQ(p.stop, std::vector<std::string>{"\nUser:"});
  EXPECT_EQ(p.seed, 7u);
  EXPECT_FALSE(p.sampler_priority.has_value());
  EXPECT_EQ(p.banned_strings, (std::vector<std::string>{"Lily", "said"}));  // KoboldCpp's name for them
}

TEST(KoboldMapping, GreedyTfsFloorAndDefaults) {
  auto r = kobold_request_from_json(json::parse(R"({"prompt":"x","temperature":0,"n":3,"top_p":0.5,"top_k":40,
                                                    "tfs":0})"),
                                    80, 2048);
  EXPECT_EQ(r.max_length, 80);            // --max-length
  EXPECT_EQ(r.max_context_length, 2048);  // the model's
  EXPECT_FLOAT_EQ(r.params.temperature, 0.0f);
  EXPECT_EQ(r.params.n, 1);
  EXPECT_FLOAT_EQ(r.params.top_p, 1.0f);
  EXPECT_EQ(r.params.top_k, -1);
  EXPECT_FLOAT_EQ(r.params.tfs, 1e-5f);
  EXPECT_FALSE(r.params.seed.has_value());
}

TEST(KoboldMapping, DynatempRange) {
  auto r = kobold_request_from_json(json::parse(R"({"prompt":"x","temperature":1.0,"dynatemp_range":0.5})"), 16, 64);
  EXPECT_FLOAT_EQ(r.params.dynatemp_min, 0.5f);
  EXPECT_FLOAT_EQ(r.params.dynatemp_max, 1.5f);
}

TEST(KoboldMapping, BadInputs) {
  auto status_of = [](const char* body) {
    try {
      kobold_request_from_json(json::parse(body), 16, 64);
    } catch (const HttpError& e) {
      return std::pair<int, std::string>(e.status(), e.what());
    }
    return std::pair<int, std::string>(0, "");
  };
  auto [s1, m1] = status_of(R"({"max_length":5})");
  EXPECT_EQ(s1, 400);
  EXPECT_NE(m1.find("'prompt'"), std::string::npos);
  auto [s2, m2] = status_of(R"({"prompt":"x","max_length":100,"max_context_length":50})");
  EXPECT_EQ(s2, 400);
  EXPECT_NE(m2.find("max_length"), std::string::npos);
  auto [s3, m3] = status_of(R"({"prompt":"x","rep_pen":"high"})");
  EXPECT_EQ(s3, 400);
  EXPECT_NE(m3.find("rep_pen"), std::string::npos);
}

TEST(KoboldMapping, LeftTruncation) {
  std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(truncate_kobold_prompt(ids, 8, 3, 0), (std::vector<int32_t>{6, 7, 8, 9, 10}));  // keep 8-3 = 5
  EXPECT_EQ(truncate_kobold_prompt(ids, 100, 3, 0), ids);
  EXPECT_EQ(truncate_kobold_prompt(ids, 4, 4, 0), std::vector<int32_t>{10});  // at least one token
  // A context larger than the model's is clamped to the model's (SillyTavern may ask for more).
  EXPECT_EQ(truncate_kobold_prompt(ids, 8192, 2, 6), (std::vector<int32_t>{7, 8, 9, 10}));
}

TEST(KoboldMapping, BadWordsIds) {
  fake::FakeTokenizer tok;
  const int32_t a = tok.id_of("[x");
  const int32_t b = tok.id_of("y]");
  tok.id_of("plain");
  auto ids = kobold_bad_words_ids(tok);
  EXPECT_EQ(ids, (std::vector<int32_t>{a, b, 2}));  // plus EOS (2), never pad
}

// KoboldCpp's grammar_retain_state: accepted either way (a client asking for true gets the grammar
// started afresh, KoboldCpp's false behaviour; docs/guided_decoding.md).
TEST(KoboldMapping, GrammarRetainStateIsAcceptedAndTheGrammarStillApplies) {
  for (bool retain : {false, true}) {
    json body = {{"prompt", "x"}, {"grammar", "root ::= \"yes\" | \"no\"\n"}, {"grammar_retain_state", retain}};
    auto r = kobold_request_from_json(body, 16, 64);
    EXPECT_EQ(r.grammar_retain_state, retain);
    EXPECT_EQ(r.params.guided.kind, GuidedKind::Gbnf);
    EXPECT_EQ(r.params.guided.text, "root ::= \"yes\" | \"no\"\n");
  }
  try {
    kobold_request_from_json(json{{"prompt", "x"}, {"grammar_retain_state", "yes"}}, 16, 64);
    ADD_FAILURE() << "a non-boolean grammar_retain_state was accepted";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("grammar_retain_state"), std::string::npos) << e.what();
  }
}
