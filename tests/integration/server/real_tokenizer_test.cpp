// The server with a real tokenizer and chat template from the test data (Qwen2.5): /v1/tokenize
// gives the reference ids, and chat requests render exactly the reference conversations.
#include <gtest/gtest.h>

#include <fstream>

#include "engine/tokenizer/tokenizer.h"
#include "tests/integration/server/server_fixture.h"

using namespace cypris;
using namespace cypris::test;
using nlohmann::json;

namespace {
const std::string kQwen = std::string(CYPRIS_TESTDATA_DIR) + "/tokenizers/qwen2-bpe";

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(json::parse(line));
  }
  return out;
}

fake::FakeEngineOptions with_qwen() {
  fake::FakeEngineOptions o;
  o.tokenizer = std::shared_ptr<const Tokenizer>(load_tokenizer(kQwen));
  o.max_model_len = 4096;
  return o;
}
}  // namespace

TEST(RealTokenizer, TokenizeMatchesReferenceIds) {
  if (!std::filesystem::exists(kQwen + "/tokenizer.json")) GTEST_SKIP() << "no test data at " << kQwen;
  TestServer s([](EngineConfig&) {}, with_qwen());
  auto cases = read_jsonl(kQwen + "/cases.jsonl");
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    json body = {{"model", "x"}, {"prompt", c["text"]}, {"add_special_tokens", false}};
    auto r = post_json(s, "/v1/tokenize", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json["tokens"], c["ids"]) << c["text"];
    EXPECT_EQ(r.json["count"], c["ids"].size());
    if (c["ids"].empty()) continue;
    auto back = post_json(s, "/v1/detokenize", json{{"tokens", c["ids"]}}.dump());
    EXPECT_EQ(back.json["prompt"], c["text"]);
  }
}

TEST(RealTokenizer, ChatUsesTheModelsTemplate) {
  if (!std::filesystem::exists(kQwen + "/tokenizer.json")) GTEST_SKIP() << "no test data at " << kQwen;
  TestServer s([](EngineConfig&) {}, with_qwen());
  int checked = 0;
  for (const auto& c : read_jsonl(std::string(CYPRIS_TESTDATA_DIR) + "/chat_templates/cases.jsonl")) {
    if (c["template"] != "Qwen-Qwen2.5-7B-Instruct.jinja" || c.contains("tools")) continue;
    json body = {{"messages", c["messages"]}, {"add_generation_prompt", c["add_generation_prompt"]}, {"max_tokens", 1}};
    auto r = post_json(s, "/v1/chat/completions", body.dump());
    ASSERT_EQ(r.status, 200) << c["name"] << ": " << r.body;
    EXPECT_EQ(s.engine->submitted().back().prompt, c["expected"].get<std::string>()) << c["name"];
    // /v1/tokenize with messages counts the same prompt.
    auto t = post_json(s, "/v1/tokenize", body.dump());
    EXPECT_EQ(t.json["tokens"].get<std::vector<int32_t>>(), s.engine->submitted().back().prompt_token_ids) << c["name"];
    ++checked;
  }
  EXPECT_GE(checked, 5);
}
