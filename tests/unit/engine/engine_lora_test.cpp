// LoRA adapters through the whole engine on the Llama fixture (tests/tools/gen_lora_fixtures.py):
// requests naming three adapters (--lora-modules) and the base model, submitted together so they
// share steps, each get the float64 reference's greedy tokens, also with fewer device slots
// (--max-loras) or host copies (--max-cpu-loras) than adapters, where adapters are swapped into
// slots no running request uses and requests wait for one; with prefix caching, an adapter request
// after a base request with the same prompt still gets its own output (adapters never share KV); an
// adapter unloaded while its requests run lets them finish and refuses new ones; unknown names and
// bad specs are errors naming them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>

#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "engine/loader/lora_adapter.h"
#include "engine/request/sampling_params.h"
#include "tests/support/engine_jobs.h"
#include "tests/support/greedy_request.h"
#include "tests/support/reference_fixture.h"
#include "tests/support/temp_dir.h"

namespace cypris {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;
using namespace testing_support;

const std::string kBase = std::string(CYPRIS_FIXTURES_DIR) + "/models/llama_gqa_tied";
const std::string kLora = std::string(CYPRIS_FIXTURES_DIR) + "/lora/llama_gqa_tied/";
const std::vector<std::string> kAdapters = {"qv_r4", "all_r8_rslora", "mlp_o_r2_bin"};

// All three adapters loaded at start, whatever the number of slots.
EngineConfig lora_config(int max_loras = 4, std::optional<int64_t> max_cpu_loras = std::nullopt) {
  EngineConfig cfg = stories_config();
  cfg.model.model = kBase;
  cfg.model.skip_tokenizer_init = true;
  cfg.lora.enable_lora = true;
  cfg.lora.max_loras = max_loras;
  cfg.lora.max_cpu_loras = max_cpu_loras;
  for (const auto& a : kAdapters) cfg.server.lora_modules.push_back(a + "=" + kLora + a);
  return cfg;
}

// The reference's greedy continuation: 8 tokens after the first 12 ids.
GenerateRequest greedy_request(const std::string& id, const std::string& lora) {
  const auto e = reference_fixture::load_expected_from(lora.empty() ? kBase : kLora + lora);
  return testing_support::reference_greedy_request(id, e.ids, lora);
}

std::vector<int32_t> reference_greedy(const std::string& lora) {
  return reference_fixture::load_expected_from(kLora + lora).greedy;
}

// Two requests for each adapter and two for the base model (ids: adapter or "base", then 0 or 1), in
// one batch: each adapter's get its reference tokens, the base's the same tokens as each other and
// not an adapter's (the base model repeats token 49 here, like qv_r4). The outputs by id.
Outputs run_adapters_and_base(Engine& engine) {
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
  EXPECT_NE(got.at("base0"), reference_greedy(kAdapters[1]));
  return got;
}

TEST(EngineLora, AdaptersAndTheBaseInOneBatchEachGetTheirReferenceTokens) {
  Engine engine(lora_config());
  ASSERT_EQ(engine.loras().size(), 3u);
  const Outputs got = run_adapters_and_base(engine);
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

// Streams of requests added one by one; their tokens collected as the engine steps.
struct Streams {
  std::map<std::string, std::shared_ptr<RequestStream>> by_id;
  Outputs out;
  void add(Engine& engine, GenerateRequest r) {
    const std::string id = r.request_id;
    by_id[id] = std::make_shared<RequestStream>(id);
    engine.add_request(std::move(r), by_id[id]);
  }
  void drain() {
    for (auto& [id, st] : by_id) {
      while (auto o = st->next(std::chrono::milliseconds(0))) {
        EXPECT_FALSE(o->error.has_value()) << *o->error;
        for (const auto& d : o->outputs) out[id].insert(out[id].end(), d.token_ids.begin(), d.token_ids.end());
      }
    }
  }
  void run(Engine& engine) {
    while (engine.has_unfinished_requests()) {
      engine.step();
      drain();
    }
  }
};

TEST(EngineLora, MoreAdaptersThanSlotsAreSwappedInAndEachRequestGetsItsReferenceTokens) {
  // One slot, and one slot with a single host copy (the others read again from their folders).
  for (const auto& [slots, host] : std::vector<std::pair<int, int64_t>>{{1, 3}, {1, 1}, {2, 2}}) {
    SCOPED_TRACE(::testing::Message() << "--max-loras " << slots << " --max-cpu-loras " << host);
    Engine engine(lora_config(slots, host));
    ASSERT_EQ(engine.loras().size(), 3u);
    run_adapters_and_base(engine);
    // Three adapters through fewer slots: at least 3 - slots were written in for requests.
    EXPECT_GE(engine.lora_swaps(), 3 - slots);
  }
}

TEST(EngineLora, ASlotInUseIsNeverTakenRequestsWaitForIt) {
  Engine engine(lora_config(/*max_loras=*/1));
  // Slot 0 holds the first adapter (loaded first); its requests start.
  Streams st;
  st.add(engine, greedy_request("a0", kAdapters[0]));
  st.add(engine, greedy_request("a1", kAdapters[0]));
  engine.step();
  const int64_t swaps = engine.lora_swaps();
  // Another adapter and the base arrive while they run: the base joins, the adapter waits.
  st.add(engine, greedy_request("b", kAdapters[1]));
  st.add(engine, greedy_request("base", ""));
  engine.step();
  EXPECT_EQ(engine.stats().num_running, 3);
  EXPECT_EQ(engine.stats().num_waiting, 1);
  EXPECT_EQ(engine.lora_swaps(), swaps);
  st.drain();
  EXPECT_TRUE(st.out["b"].empty());
  st.run(engine);
  EXPECT_EQ(st.out.at("a0"), reference_greedy(kAdapters[0]));
  EXPECT_EQ(st.out.at("a1"), reference_greedy(kAdapters[0]));
  EXPECT_EQ(st.out.at("b"), reference_greedy(kAdapters[1]));
  EXPECT_EQ(engine.lora_swaps(), swaps + 1);
}

TEST(EngineLora, UnloadWhileRunningLosesNoRequestAndOthersTakeTheFreeSlots) {
  Engine engine(lora_config(/*max_loras=*/3));
  Streams st;
  for (int i = 0; i < 3; ++i) st.add(engine, greedy_request("r" + std::to_string(i), kAdapters[1]));
  engine.step();  // prefill
  EXPECT_TRUE(engine.remove_lora(kAdapters[1]));
  EXPECT_FALSE(engine.remove_lora(kAdapters[1]));
  EXPECT_EQ(engine.loras().size(), 2u);
  EXPECT_THAT([&] { engine.add_request(greedy_request("late", kAdapters[1]), std::make_shared<RequestStream>("late")); },
              ::testing::ThrowsMessage<Error>(HasSubstr("'all_r8_rslora' is not loaded")));
  // The same weights under a new name: every slot holds an adapter, and the unloaded one's is still
  // used, so "other" takes the least recently used of the two others' slots and runs alongside.
  engine.add_lora("other", load_lora_adapter(kLora + kAdapters[1], 16));
  GenerateRequest r = greedy_request("x", kAdapters[1]);
  r.lora_name = "other";
  st.add(engine, r);
  st.run(engine);
  for (const std::string id : {"r0", "r1", "r2", "x"}) EXPECT_EQ(st.out.at(id), reference_greedy(kAdapters[1])) << id;
  // The others still run after the swap (the evicted one is written back into a slot).
  EXPECT_EQ(run_requests(engine, {greedy_request("q", kAdapters[0]), greedy_request("m", kAdapters[2])}),
            (Outputs{{"m", reference_greedy(kAdapters[2])}, {"q", reference_greedy(kAdapters[0])}}));
}

// --qlora-adapter-name-or-path: the adapter is loaded at start under its folder's name and served
// like a --lora-modules entry.
TEST(EngineLora, TheQloraFlagServesItsAdapterUnderItsFoldersName) {
  EngineConfig cfg = lora_config();
  cfg.server.lora_modules.clear();
  cfg.lora.qlora_adapter_name_or_path = kLora + "all_r8_rslora/";
  Engine engine(cfg);
  ASSERT_EQ(engine.loras().size(), 1u);
  EXPECT_EQ(engine.loras()[0].name, "all_r8_rslora");
  const Outputs got = run_requests(engine, {greedy_request("q", "all_r8_rslora")});
  EXPECT_EQ(got.at("q"), reference_greedy("all_r8_rslora"));
}

TEST(EngineLora, BadNamesAndSpecsAreErrorsNamingThem) {
  Engine engine(lora_config(3));
  GenerateRequest unknown = greedy_request("u", "");
  unknown.lora_name = "nope";
  EXPECT_THAT([&] { engine.add_request(unknown, std::make_shared<RequestStream>("u")); },
              ::testing::ThrowsMessage<Error>(HasSubstr("'nope' is not loaded")));
  const auto a = std::make_shared<const LoraAdapter>(load_lora_adapter(kLora + kAdapters[0], 16));
  EXPECT_THAT([&] { engine.add_lora(kAdapters[0], a); }, ::testing::ThrowsMessage<Error>(HasSubstr("already loaded")));
  EXPECT_THAT([&] { engine.add_lora(kBase, a); }, ::testing::ThrowsMessage<Error>(HasSubstr("base model's name")));

  EngineConfig bad = lora_config();
  bad.lora.max_cpu_loras = 2;
  EXPECT_THAT([&] { Engine e(bad); }, ::testing::ThrowsMessage<Error>(HasSubstr("--max-cpu-loras 2")));
  bad.lora.max_cpu_loras.reset();
  bad.server.lora_modules = {"no-equals-sign"};
  EXPECT_THAT([&] { Engine e(bad); }, ::testing::ThrowsMessage<Error>(HasSubstr("'no-equals-sign'")));
  bad.server.lora_modules = {R"({"name": "j", "path": ")" + kLora + kAdapters[0] + R"("})"};
  Engine json_form(bad);
  EXPECT_EQ(json_form.loras().at(0).name, "j");
  // An adapter left host memory whose folder is gone: the request naming it is an error naming it.
  {
    test::TempDir dir("lora_gone");
    fs::copy(kLora + kAdapters[0], dir.path() / "a");
    EngineConfig one = lora_config(1, 1);
    one.server.lora_modules = {"gone=" + (dir.path() / "a").string(), kAdapters[1] + "=" + kLora + kAdapters[1]};
    Engine e(one);
    fs::remove_all(dir.path() / "a");
    GenerateRequest gone = greedy_request("g", kAdapters[0]);
    gone.lora_name = "gone";
    EXPECT_THAT([&] { e.add_request(gone, std::make_shared<RequestStream>("g")); },
                ::testing::ThrowsMessage<Error>(HasSubstr((dir.path() / "a").string())));
    EXPECT_EQ(run_requests(e, {greedy_request("k", kAdapters[1])}).at("k"), reference_greedy(kAdapters[1]));
  }
  EngineConfig off = stories_config();
  off.model.model = kBase;
  off.model.skip_tokenizer_init = true;
  Engine plain(off);
  EXPECT_FALSE(plain.lora_enabled());
  EXPECT_THAT([&] { plain.add_lora("a", a); }, ::testing::ThrowsMessage<Error>(HasSubstr("--enable-lora")));
}

}  // namespace
}  // namespace cypris
