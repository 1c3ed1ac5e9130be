// The desktop app's LoRA adapters against a real AsyncEngine on the Llama fixture
// (tests/tools/gen_lora_fixtures.py): the Models panel's load lists the adapter (name, folder,
// rank) and unload removes it; what the engine refuses (a bad folder, an adapter whose shapes do not
// fit, LoRA off) and a hub repo id come back as text; a chat with an adapter chosen gets the tokens
// the engine gives a request naming that adapter directly, and "base model" the base's tokens.
#include "app/ui/state/lora_session.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>

#include "app/ui/state/chat_session.h"
#include "app/ui/state/real_services.h"
#include "engine/core/async_engine.h"
#include "engine/request/sampling_params.h"
#include "tests/support/engine_jobs.h"
#include "tests/support/fake_services.h"
#include "tests/support/reference_fixture.h"
#include "tests/support/safetensors_edit.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/ui_state/pump.h"

namespace cypris {
namespace {

using ::testing::HasSubstr;
using namespace testing_support;
namespace fs = std::filesystem;

const std::string kBase = std::string(CYPRIS_FIXTURES_DIR) + "/models/llama_gqa_tied";
const std::string kLora = std::string(CYPRIS_FIXTURES_DIR) + "/lora/llama_gqa_tied/";

std::vector<int32_t> prompt_ids() {
  const auto e = reference_fixture::load_expected_from(kBase);
  return {e.ids.begin(), e.ids.begin() + 12};
}

// The fixture has no tokenizer: the chat template step returns the reference prompt, and every
// stream generate() hands the chat is drained here first (its token ids recorded) and replayed.
class FixtureServices : public RealServices {
 public:
  std::vector<int32_t> apply_chat_template(const EngineClient&, const std::vector<ChatTemplateMessage>&) override {
    return prompt_ids();
  }
  std::shared_ptr<RequestStream> generate(EngineClient& engine, const std::string& request_id, std::vector<int32_t> ids,
                                          const nlohmann::json& sampler) override {
    auto real = RealServices::generate(engine, request_id, std::move(ids), sampler);
    auto replay = std::make_shared<RequestStream>(request_id);
    std::vector<int32_t> got;
    while (auto out = real->next()) {
      for (const auto& d : out->outputs) got.insert(got.end(), d.token_ids.begin(), d.token_ids.end());
      replay->push(*out);
    }
    std::lock_guard<std::mutex> lock(mu);
    tokens.push_back(got);
    return replay;
  }
  std::mutex mu;
  std::vector<std::vector<int32_t>> tokens;
};

struct LoraSessionTest : ::testing::Test {
  static void SetUpTestSuite() {
    EngineConfig cfg = stories_config();
    cfg.model.model = kBase;
    cfg.model.skip_tokenizer_init = true;
    cfg.lora.enable_lora = true;
    cfg.lora.max_loras = 2;
    engine_ = std::make_shared<AsyncEngine>(cfg);
  }
  static void TearDownTestSuite() { engine_.reset(); }
  void TearDown() override {
    jobs.shutdown();
    for (const auto& a : engine_->loras()) engine_->unload_lora(a.name);
  }
  // Loads through the session and waits for the result.
  void load(LoraSession& s, const std::string& name, const std::string& path) {
    ASSERT_TRUE(s.load(engine_, name, path)) << s.error();
    fake::pump_until(queue, jobs, [&] { return !s.busy(); });
  }

  static std::shared_ptr<AsyncEngine> engine_;
  UiQueue queue;
  BackgroundJobs jobs;
};
std::shared_ptr<AsyncEngine> LoraSessionTest::engine_;

TEST_F(LoraSessionTest, LoadListsTheAdapterAndUnloadRemovesIt) {
  LoraSession s(queue, jobs);
  s.refresh(engine_);
  EXPECT_TRUE(s.enabled());
  EXPECT_TRUE(s.adapters().empty());
  load(s, "", kLora + "qv_r4");
  EXPECT_EQ(s.error(), "");
  ASSERT_EQ(s.adapters().size(), 1u);
  EXPECT_EQ(s.adapters()[0].name, "qv_r4");  // named after its folder
  EXPECT_EQ(s.adapters()[0].path, kLora + "qv_r4");
  EXPECT_EQ(s.adapters()[0].rank, 4);
  EXPECT_EQ(s.message(), "loaded qv_r4 (rank 4)");

  ASSERT_TRUE(s.unload(engine_, "qv_r4"));
  fake::pump_until(queue, jobs, [&] { return !s.busy(); });
  EXPECT_EQ(s.error(), "");
  EXPECT_TRUE(s.adapters().empty());
  EXPECT_TRUE(engine_->loras().empty());
}

TEST_F(LoraSessionTest, EngineRefusalsAndHubIdsAreTextNotCrashes) {
  LoraSession s(queue, jobs);
  const std::string missing = kLora + "no_such_adapter";
  load(s, "x", missing);
  EXPECT_THAT(s.error(), HasSubstr(missing));
  // qv_r4 with one A matrix one column too wide for the model.
  test::TempDir dir("lora_shape");
  fs::copy_file(kLora + "qv_r4/adapter_config.json", dir.path() / "adapter_config.json");
  auto tensors = read_tensors(kLora + "qv_r4/adapter_model.safetensors");
  bool widened = false;
  for (auto& [name, t] : tensors) {
    if (widened || name.find("lora_A") == std::string::npos || t.dtype != "F32") continue;
    t.shape.back() += 1;
    t.bytes.append(static_cast<size_t>(t.shape.front()) * sizeof(float), '\0');
    widened = true;
  }
  ASSERT_TRUE(widened);
  write_tensors(dir.path() / "adapter_model.safetensors", tensors);
  load(s, "wide", dir.path().string());
  EXPECT_THAT(s.error(), HasSubstr("shape"));
  EXPECT_TRUE(s.adapters().empty());

  {
    // A hub repo goes to the engine's hub lookup; offline with an empty cache it names the repo.
    test::TempDir cache("lora_hub_cache");
    ::setenv("HF_HUB_CACHE", cache.path().c_str(), 1);
    ::setenv("HF_HUB_OFFLINE", "1", 1);
    EXPECT_EQ(LoraSession::default_name("someone/some-lora@v2"), "some-lora");
    load(s, "", "someone/some-lora@v2");
    EXPECT_THAT(s.error(), HasSubstr("someone/some-lora@v2"));
    EXPECT_THAT(s.error(), HasSubstr("offline"));
    ::unsetenv("HF_HUB_OFFLINE");
    ::unsetenv("HF_HUB_CACHE");
  }
  EXPECT_FALSE(s.load(engine_, "", ""));
  EXPECT_NE(s.error(), "");

  // A model loaded without --enable-lora.
  auto plain = std::make_shared<fake::FakeEngineClient>();
  s.refresh(plain);
  EXPECT_FALSE(s.enabled());
  EXPECT_FALSE(s.load(plain, "", kLora + "qv_r4"));
  EXPECT_THAT(s.error(), HasSubstr("--enable-lora"));
}

TEST_F(LoraSessionTest, AChatWithAnAdapterChosenGetsTheAdaptersTokens) {
  LoraSession lora(queue, jobs);
  // (qv_r4 repeats the base model's token here; this one does not.)
  load(lora, "", kLora + "all_r8_rslora");
  ASSERT_EQ(lora.adapters().size(), 1u);

  // What the engine gives requests naming the adapter / the base directly.
  auto direct = [&](const std::string& name) {
    GenerateRequest r;
    r.request_id = "direct-" + name;
    r.prompt_token_ids = prompt_ids();
    auto p = std::make_shared<SamplingParams>();
    p->temperature = 0.0f;
    p->max_tokens = 8;
    p->ignore_eos = true;
    r.params = p;
    r.lora_name = name;
    auto stream = engine_->submit(std::move(r));
    std::vector<int32_t> got;
    while (auto out = stream->next()) {
      for (const auto& d : out->outputs) got.insert(got.end(), d.token_ids.begin(), d.token_ids.end());
    }
    return got;
  };
  const auto want_adapter = direct("all_r8_rslora");
  const auto want_base = direct("");
  ASSERT_EQ(want_adapter.size(), 8u);
  ASSERT_NE(want_adapter, want_base);

  FixtureServices services;
  double clock = 0;
  ChatSession chat(services, queue, jobs, [&] { return clock += 0.25; });
  fake::JobsStopper stop_jobs{jobs};
  chat.samplers().set("temperature", 0.0);
  chat.samplers().set("max_tokens", 8);
  chat.samplers().set("ignore_eos", true);
  auto reply = [&](const std::string& adapter) {
    chat.set_adapter(adapter);
    EXPECT_TRUE(chat.send(engine_, "hello")) << chat.last_error();
    fake::pump_until(queue, jobs, [&] { return !chat.transcript().generating(); });
    std::lock_guard<std::mutex> lock(services.mu);
    return services.tokens.back();
  };
  EXPECT_EQ(reply("all_r8_rslora"), want_adapter);
  EXPECT_EQ(reply(""), want_base);
  EXPECT_EQ(services.tokens.size(), 2u);
}

}  // namespace
}  // namespace cypris
