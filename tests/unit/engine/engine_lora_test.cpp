// LoRA adapters through the whole engine on the Llama fixture (tests/tools/gen_lora_fixtures.py):
// requests naming three adapters (--lora-modules) and the base model, submitted together so they
// share steps, each get the float64 reference's greedy tokens; with prefix caching, an adapter
// request after a base request with the same prompt still gets its own output (adapters never share
// KV); an adapter unloaded while its requests run lets them finish and refuses new ones; its slot is
// only taken again once they are done; unknown names and bad specs are errors naming them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "engine/loader/lora_adapter.h"
#include "engine/request/sampling_params.h"
#include "tests/support/engine_jobs.h"
#include "tests/support/reference_fixture.h"

namespace cypris {
namespace {

using ::testing::HasSubstr;
using namespace testing_support;

const std::string kBase = std::string(CYPRIS_FIXTURES_DIR) + "/models/llama_gqa_tied";
const std::string kLora = std::string(CYPRIS_FIXTURES_DIR) + "/lora/llama_gqa_tied/";
const std::vector<std::string> kAdapters = {"qv_r4", "all_r8_rslora", "mlp_o_r2_bin"};

EngineConfig lora_config(int max_loras = 4) {
  EngineConfig cfg = stories_config();
  cfg.model.model = kBase;
  cfg.model.skip_tokenizer_init = true;
  cfg.lora.enable_lora = true;
  cfg.lora.max_loras = max_loras;
  for (const auto& a : kAdapters) {
    if (static_cast<int>(cfg.server.lora_modules.size()) < max_loras) cfg.server.lora_modules.push_back(a + "=" + kLora + a);
  }
  return cfg;
}

// The reference's greedy continuation: 8 tokens after the first 12 ids.
GenerateRequest greedy_request(const std::string& id, const std::string& lora) {
  const auto e = reference_fixture::load_expected_from(lora.empty() ? kBase : kLora + lora);
  GenerateRequest r;
  r.request_id = id;
  r.prompt_token_ids.assign(e.ids.begin(), e.ids.begin() + 12);
  auto p = std::make_shared<SamplingParams>();
  p->temperature = 0.0f;
  p->max_tokens = 8;
  p->ignore_eos = true;
  r.params = p;
  r.lora_name = lora;
  return r;
}

std::vector<int32_t> reference_greedy(const std::string& lora) {
  return reference_fixture::load_expected_from(kLora + lora).greedy;
}

TEST(EngineLora, AdaptersAndTheBaseInOneBatchEachGetTheirReferenceTokens) {
  Engine engine(lora_config());
  ASSERT_EQ(engine.loras().size(), 3u);
  std::vector<GenerateRequest> reqs;
  for (int copy = 0; copy < 2; ++copy) {
    for (const auto& a : kAdapters) reqs.push_back(greedy_request(a + std::to_string(copy), a));
    reqs.push_back(greedy_request("base" + std::to_string(copy), ""));
  }
  const Outputs got = run_requests(engine, reqs);
  for (int copy = 0; copy < 2; ++copy) {
    for (const auto& a : kAdapters) EXPECT_EQ(got.at(a + std::to_string(copy)), reference_greedy(a)) << a;
  }
  EXPECT_EQ(got.at("base0"), got.at("base1"));
  // The base rows are not an adapter's (the base model repeats token 49 here, like qv_r4).
  EXPECT_NE(got.at("base0"), reference_greedy(kAdapters[1]));
  EXPECT_NE(got.at("base0"), reference_greedy(kAdapters[2]));
}

TEST(EngineLora, PrefixCachingNeverServesOneAdaptersKvToAnother) {
  EngineConfig cfg = lora_config();
  cfg.cache.enable_prefix_caching = true;
  cfg.cache.block_size = 8;  // the 12-token prompt's first block is cached
  Engine engine(cfg);
  // The base model first, then each adapter on the same prompt, one after another.
  run_requests(engine, {greedy_request("base", "")});
  for (const auto& a : kAdapters) {
    const Outputs got = run_requests(engine, {greedy_request(a, a)});
    EXPECT_EQ(got.at(a), reference_greedy(a)) << a;
  }
  // The same adapter again may reuse its own blocks, and still gets its tokens.
  EXPECT_EQ(run_requests(engine, {greedy_request("again", kAdapters[1])}).at("again"), reference_greedy(kAdapters[1]));
}

TEST(EngineLora, UnloadWhileRunningLosesNoRequestAndFreesTheSlotAfterwards) {
  Engine engine(lora_config(/*max_loras=*/3));
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    const std::string id = "r" + std::to_string(i);
    streams[id] = std::make_shared<RequestStream>(id);
    engine.add_request(greedy_request(id, kAdapters[1]), streams[id]);
  }
  engine.step();  // prefill
  EXPECT_TRUE(engine.remove_lora(kAdapters[1]));
  EXPECT_FALSE(engine.remove_lora(kAdapters[1]));
  EXPECT_THAT([&] { engine.add_request(greedy_request("late", kAdapters[1]), std::make_shared<RequestStream>("late")); },
              ::testing::ThrowsMessage<Error>(HasSubstr("'all_r8_rslora' is not loaded")));
  // Every slot is held (two adapters) or still used (the unloaded one's requests).
  const LoraAdapter other = load_lora_adapter(kLora + kAdapters[1], 16);
  EXPECT_THAT([&] { engine.add_lora("other", other); }, ::testing::ThrowsMessage<Error>(HasSubstr("--max-loras 3")));
  Outputs out;
  while (engine.has_unfinished_requests()) {
    engine.step();
    for (auto& [id, st] : streams) {
      while (auto o = st->next(std::chrono::milliseconds(0))) {
        EXPECT_FALSE(o->error.has_value()) << *o->error;
        for (const auto& d : o->outputs) out[id].insert(out[id].end(), d.token_ids.begin(), d.token_ids.end());
      }
    }
  }
  for (const auto& [id, st] : streams) EXPECT_EQ(out[id], reference_greedy(kAdapters[1])) << id;
  // Done: the slot is free again, and the adapter loaded under a new name runs as before.
  engine.add_lora("other", other);
  EXPECT_EQ(run_requests(engine, {[&] {
                           GenerateRequest r = greedy_request("x", kAdapters[1]);
                           r.lora_name = "other";
                           return r;
                         }()})
                .at("x"),
            reference_greedy(kAdapters[1]));
}

TEST(EngineLora, BadNamesAndSpecsAreErrorsNamingThem) {
  Engine engine(lora_config(3));
  GenerateRequest unknown = greedy_request("u", "");
  unknown.lora_name = "nope";
  EXPECT_THAT([&] { engine.add_request(unknown, std::make_shared<RequestStream>("u")); },
              ::testing::ThrowsMessage<Error>(HasSubstr("'nope' is not loaded")));
  const LoraAdapter a = load_lora_adapter(kLora + kAdapters[0], 16);
  EXPECT_THAT([&] { engine.add_lora(kAdapters[0], a); }, ::testing::ThrowsMessage<Error>(HasSubstr("already loaded")));
  EXPECT_THAT([&] { engine.add_lora(kBase, a); }, ::testing::ThrowsMessage<Error>(HasSubstr("base model's name")));

  EngineConfig bad = lora_config();
  bad.server.lora_modules = {"no-equals-sign"};
  EXPECT_THAT([&] { Engine e(bad); }, ::testing::ThrowsMessage<Error>(HasSubstr("'no-equals-sign'")));
  bad.server.lora_modules = {R"({"name": "j", "path": ")" + kLora + kAdapters[0] + R"("})"};
  Engine json_form(bad);
  EXPECT_EQ(json_form.loras().at(0).name, "j");
  EngineConfig off = stories_config();
  off.model.model = kBase;
  off.model.skip_tokenizer_init = true;
  Engine plain(off);
  EXPECT_FALSE(plain.lora_enabled());
  EXPECT_THAT([&] { plain.add_lora("a", a); }, ::testing::ThrowsMessage<Error>(HasSubstr("--enable-lora")));
}

}  // namespace
}  // namespace cypris
