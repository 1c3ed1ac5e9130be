// LoRA over HTTP (in front of the fake engine, whose load_lora reads adapters with the real loader):
// Aphrodite's /v1/lora/load and /v1/lora/unload and vLLM's /v1/load_lora_adapter and
// /v1/unload_lora_adapter with the admin key; /v1/models lists each adapter with the base model as
// its parent; a completion or chat naming an adapter reaches the engine with it and answers under
// its name; an unknown model name is a 404 naming it; a bad adapter folder is a 400 saying why;
// unloading an unknown adapter is a 404; Kobold requests run on the base model.
#include <gtest/gtest.h>

#include "tests/integration/server/server_fixture.h"

namespace cypris::test {
namespace {

const std::string kLora = std::string(CYPRIS_FIXTURES_DIR) + "/lora/llama_gqa_tied/";

struct LoraServer : TestServer {
  LoraServer()
      : TestServer([](EngineConfig& c) { c.server.admin_key = "adm"; }, [] {
          fake::FakeEngineOptions o;
          o.lora = true;
          return o;
        }()) {}
  httplib::Headers admin = {{"Authorization", "Bearer adm"}};
  Reply post(const std::string& path, const nlohmann::json& body) const {
    return post_json(*this, path, body.dump(), admin);
  }
};

TEST(LoraRoutes, LoadListUseAndUnloadThroughBothApis) {
  LoraServer s;
  Reply r = s.post("/v1/lora/load", {{"name", "qv"}, {"path", kLora + "qv_r4"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["status"], "success");
  r = s.post("/v1/load_lora_adapter", {{"lora_name", "all"}, {"lora_path", kLora + "all_r8_rslora"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("Success: LoRA adapter 'all' added"), std::string::npos);

  r = get(s, "/v1/models", s.admin);
  ASSERT_EQ(r.status, 200);
  std::map<std::string, nlohmann::json> cards;
  for (const auto& m : r.json["data"]) cards[m["id"]] = m;
  ASSERT_EQ(cards.size(), 3u) << r.body;
  EXPECT_TRUE(cards["fake-model"]["parent"].is_null());
  EXPECT_EQ(cards["qv"]["parent"], "fake-model");
  EXPECT_EQ(cards["all"]["parent"], "fake-model");
  EXPECT_EQ(cards["qv"]["root"], kLora + "qv_r4");

  r = s.post("/v1/completions", {{"model", "qv"}, {"prompt", "a b"}, {"max_tokens", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["model"], "qv");
  EXPECT_EQ(s.engine->submitted().back().lora_name, "qv");
  r = s.post("/v1/chat/completions",
             {{"model", "all"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["model"], "all");
  EXPECT_EQ(s.engine->submitted().back().lora_name, "all");
  r = s.post("/v1/completions", {{"model", "fake-model"}, {"prompt", "a"}, {"max_tokens", 1}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(s.engine->submitted().back().lora_name, "");
  r = s.post("/api/v1/generate", {{"prompt", "a"}, {"max_length", 1}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(s.engine->submitted().back().lora_name, "");  // Kobold names no model: the base

  auto c = s.client();
  r = to_reply(c.Delete("/v1/lora/unload?lora_name=qv", s.admin));
  ASSERT_EQ(r.status, 200) << r.body;
  r = s.post("/v1/unload_lora_adapter", {{"lora_name", "all"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(s.engine->loras().size(), 0u);
  r = s.post("/v1/completions", {{"model", "qv"}, {"prompt", "a"}, {"max_tokens", 1}});
  EXPECT_EQ(r.status, 404);
}

TEST(LoraRoutes, UnknownNamesAndBadAdaptersAreRefusedSayingWhy) {
  LoraServer s;
  Reply r = s.post("/v1/completions", {{"model", "no-such-adapter"}, {"prompt", "a"}, {"max_tokens", 1}});
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("no-such-adapter"), std::string::npos) << r.body;
  const size_t before = s.engine->num_submitted();
  r = s.post("/v1/chat/completions", {{"model", "nope"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}});
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(s.engine->num_submitted(), before);

  r = s.post("/v1/lora/load", {{"name", "bad"}, {"path", kLora + "missing"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("not a folder"), std::string::npos) << r.body;
  r = s.post("/v1/lora/load", {{"name", "x"}});
  EXPECT_EQ(r.status, 400);
  r = s.post("/v1/load_lora_adapter", {{"lora_name", 3}, {"lora_path", "p"}});
  EXPECT_EQ(r.status, 400);
  r = s.post("/v1/unload_lora_adapter", {{"lora_name", "never-loaded"}});
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("never-loaded"), std::string::npos);
}

}  // namespace
}  // namespace cypris::test
