// The UI controllers against FakeServices: loading (failure keeps the app usable), chat streaming,
// stop and regenerate, hub browse and download, the server switch.
#include <gtest/gtest.h>

#include <atomic>

#include "app/ui/state/chat_session.h"
#include "app/ui/state/engine_session.h"
#include "app/ui/state/hub_session.h"
#include "app/ui/state/server_session.h"
#include "tests/support/fake_services.h"
#include "tests/unit/ui_state/pump.h"

namespace cypris {
namespace {

using fake::FakeEngineClient;
using fake::FakeServices;
using fake::pump_until;

struct Fixture : ::testing::Test {
  FakeServices services;
  UiQueue queue;
  BackgroundJobs jobs;
  double clock = 0.0;
  std::function<double()> now = [this] { return clock += 0.25; };
  void TearDown() override { jobs.shutdown(); }
};

using EngineSessionTest = Fixture;
using ChatSessionTest = Fixture;
using HubSessionTest = Fixture;
using ServerSessionTest = Fixture;

TEST_F(EngineSessionTest, FailedLoadShowsTheErrorAndCanBeRetried) {
  EngineSession s(services, queue, jobs);
  fake::JobsStopper stop_jobs{jobs};
  EngineConfig cfg;
  cfg.model.model = "tiny";
  s.load(cfg);
  EXPECT_EQ(s.status(), EngineSession::Status::Loading);
  pump_until(queue, jobs, [&] { return s.status() != EngineSession::Status::Loading; });
  EXPECT_EQ(s.status(), EngineSession::Status::Failed);
  EXPECT_EQ(s.error(), "engine not available in this build");
  EXPECT_FALSE(s.engine());

  auto engine = std::make_shared<FakeEngineClient>();
  engine->info_.model = "tiny";
  services.engine_to_load = engine;
  services.load_steps = {{0.5, "weights"}, {1.0, "done"}};
  bool loaded_called = false;
  s.on_loaded = [&](const EngineSession&) { loaded_called = true; };
  s.load(cfg);
  pump_until(queue, jobs, [&] { return s.status() != EngineSession::Status::Loading; });
  EXPECT_EQ(s.status(), EngineSession::Status::Loaded);
  EXPECT_TRUE(loaded_called);
  EXPECT_EQ(s.model_info().model, "tiny");
  EXPECT_EQ(s.engine(), engine);
  EXPECT_EQ(services.load_calls.size(), 2u);
  EXPECT_EQ(services.load_calls.back().model.model, "tiny");
}

TEST_F(EngineSessionTest, StatsArePolledIntoTheHistory) {
  auto engine = std::make_shared<FakeEngineClient>();
  engine->stats_.kv_cache_usage = 0.5;
  engine->stats_.num_running = 2;
  services.engine_to_load = engine;
  EngineSession s(services, queue, jobs);
  fake::JobsStopper stop_jobs{jobs};
  s.load(EngineConfig{});
  pump_until(queue, jobs, [&] { return s.loaded(); });
  s.poll_stats(100.0);
  s.poll_stats(100.1);  // within the interval: no second poll
  pump_until(queue, jobs, [&] { return !s.history().empty(); });
  EXPECT_EQ(s.history().kv_usage.size(), 1u);
  EXPECT_FLOAT_EQ(s.history().kv_usage.latest(), 50.0f);
  EXPECT_EQ(s.history().running.latest(), 2.0f);
  s.unload();
  EXPECT_EQ(s.status(), EngineSession::Status::Unloaded);
  EXPECT_FALSE(s.engine());
}

TEST_F(ChatSessionTest, ReplyStreamsIntoTheTranscript) {
  auto engine = std::make_shared<FakeEngineClient>();
  ChatSession chat(services, queue, jobs, now);
  fake::JobsStopper stop_jobs{jobs};
  chat.transcript().system_prompt = "Be nice.";
  chat.samplers().set("temperature", 0.5);
  ASSERT_TRUE(chat.send(engine, "Hi there"));
  pump_until(queue, jobs, [&] { return !chat.transcript().generating(); });
  const auto& msgs = chat.transcript().messages();
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[1].content, "Hello!");
  EXPECT_EQ(msgs[1].state, ChatMessage::State::Done);
  EXPECT_EQ(msgs[1].finish_reason, "stop");
  EXPECT_EQ(msgs[1].generated_tokens, 3);
  EXPECT_EQ(msgs[1].prompt_tokens, 3);
  EXPECT_GT(msgs[1].tokens_per_s(), 0.0);
  ASSERT_EQ(services.template_calls.size(), 1u);
  ASSERT_EQ(services.template_calls[0].size(), 2u);
  EXPECT_EQ(services.template_calls[0][0].role, "system");
  EXPECT_EQ(services.template_calls[0][1].content, "Hi there");
  EXPECT_EQ(services.generate_calls[0].at("temperature"), 0.5);

  services.reply_pieces = {"Again"};
  ASSERT_TRUE(chat.regenerate(engine));
  pump_until(queue, jobs, [&] { return !chat.transcript().generating(); });
  ASSERT_EQ(chat.transcript().messages().size(), 2u);
  EXPECT_EQ(chat.transcript().messages()[1].content, "Again");
  EXPECT_EQ(services.template_calls[1].size(), 2u);  // the old answer is not sent back
}

TEST_F(ChatSessionTest, StopEndsTheReplyAsStopped) {
  auto engine = std::make_shared<FakeEngineClient>();
  services.hold_stream = true;
  ChatSession chat(services, queue, jobs, now);
  fake::JobsStopper stop_jobs{jobs};
  ASSERT_TRUE(chat.send(engine, "Tell me a long story"));
  pump_until(queue, jobs, [&] { return services.last_stream() != nullptr; });
  RequestOutput part;
  CompletionDelta d;
  d.text = "Once";
  d.token_ids = {5};
  part.outputs.push_back(d);
  services.last_stream()->push(part);
  pump_until(queue, jobs, [&] { return chat.transcript().messages()[1].content == "Once"; });
  chat.stop();
  pump_until(queue, jobs, [&] { return !chat.transcript().generating(); });
  EXPECT_EQ(chat.transcript().messages()[1].state, ChatMessage::State::Stopped);
  EXPECT_EQ(chat.transcript().messages()[1].content, "Once");
}

TEST_F(ChatSessionTest, ErrorsBecomeAFailedReplyNotACrash) {
  auto engine = std::make_shared<FakeEngineClient>();
  ChatSession chat(services, queue, jobs, now);
  fake::JobsStopper stop_jobs{jobs};
  EXPECT_FALSE(chat.send(nullptr, "hi"));
  EXPECT_NE(chat.last_error().find("load a model"), std::string::npos);
  services.generate_error = "prompt is longer than --max-model-len";
  ASSERT_TRUE(chat.send(engine, "hi"));
  pump_until(queue, jobs, [&] { return !chat.transcript().generating(); });
  EXPECT_EQ(chat.transcript().messages()[1].state, ChatMessage::State::Failed);
  EXPECT_EQ(chat.transcript().messages()[1].error, "prompt is longer than --max-model-len");
}

TEST_F(HubSessionTest, BrowseChooseAndDownload) {
  services.search_results = {{"org/tiny-llama", 10, 1, "text-generation", ""}, {"org/other", 1, 0, "", ""}};
  services.refs["org/tiny-llama"] = {{HubRef::Kind::Branch, "main", "abc"}, {HubRef::Kind::Tag, "v1", "def"}};
  services.files["org/tiny-llama@main"] = {{"config.json", 500},
                                           {"model.safetensors", 5000},
                                           {"pytorch_model.bin", 5000},
                                           {"tokenizer.json", 1500},
                                           {"README.md", 100}};
  services.files["org/tiny-llama@v1"] = {{"config.json", 400}};
  HubSession hub(services, queue, jobs, now);
  fake::JobsStopper stop_jobs{jobs};
  std::string downloaded;
  hub.on_downloaded = [&](const std::string& p) { downloaded = p; };
  hub.search("tiny");
  pump_until(queue, jobs, [&] { return !hub.searching(); });
  ASSERT_EQ(hub.results().size(), 1u);
  hub.select_repo("org/tiny-llama");
  pump_until(queue, jobs, [&] { return !hub.listing(); });
  EXPECT_EQ(hub.refs().size(), 2u);
  EXPECT_EQ(hub.revision(), "main");
  ASSERT_EQ(hub.files().size(), 5u);
  // Safetensors preferred over the .bin copy; the README is left out.
  EXPECT_EQ(hub.chosen(), (std::set<std::string>{"config.json", "model.safetensors", "tokenizer.json"}));
  EXPECT_EQ(hub.chosen_bytes(), 7000);
  hub.download();
  pump_until(queue, jobs, [&] { return !hub.downloading(); });
  EXPECT_EQ(hub.download_error(), "");
  EXPECT_EQ(downloaded, "/cache/org/tiny-llama/main");
  EXPECT_TRUE(hub.progress().all_finished());
  EXPECT_EQ(hub.progress().bytes_done(), 7000);

  hub.select_revision("v1");
  pump_until(queue, jobs, [&] { return !hub.listing(); });
  ASSERT_EQ(hub.files().size(), 1u);
  EXPECT_EQ(hub.files()[0].size, 400);
}

TEST_F(HubSessionTest, RepoWithoutMainUsesItsBranch) {
  services.refs["old/model"] = {{HubRef::Kind::Tag, "v1", "a"}, {HubRef::Kind::Branch, "master", "b"}};
  services.files["old/model@master"] = {{"config.json", 10}};
  HubSession hub(services, queue, jobs, now);
  fake::JobsStopper stop_jobs{jobs};
  hub.select_repo("old/model");
  pump_until(queue, jobs, [&] { return !hub.listing() && hub.revision() == "master" && !hub.files().empty(); });
  EXPECT_EQ(hub.list_error(), "");
  ASSERT_EQ(hub.files().size(), 1u);
}

TEST_F(HubSessionTest, ErrorsAndCancelAreReported) {
  services.hub_error = "network unreachable";
  services.cache = {{"o/m", "main", "/cache/o/m", 10}, {"o/n", "v2", "/cache/o/n", 20}};
  HubSession hub(services, queue, jobs, now);
  fake::JobsStopper stop_jobs{jobs};
  hub.search("x");
  pump_until(queue, jobs, [&] { return !hub.searching(); });
  EXPECT_EQ(hub.search_error(), "network unreachable");

  services.hub_error.clear();
  services.refs["o/m"] = {};
  services.files["o/m@main"] = {{"config.json", 10}};
  services.download_blocks_until_cancel = true;
  hub.select_repo("o/m");
  pump_until(queue, jobs, [&] { return !hub.listing(); });
  hub.download();
  EXPECT_TRUE(hub.downloading());
  hub.cancel_download();
  pump_until(queue, jobs, [&] { return !hub.downloading(); });
  EXPECT_EQ(hub.download_error(), "download cancelled");

  hub.delete_cached("o/m", "main");
  pump_until(queue, jobs, [&] { return hub.cache().size() == 1; });
  EXPECT_EQ(hub.cache()[0].repo, "o/n");
}

TEST_F(ServerSessionTest, SwitchOnOffWithTheChosenSettings) {
  auto engine = std::make_shared<FakeEngineClient>();
  ServerSession server(services, queue, jobs);
  fake::JobsStopper stop_jobs{jobs};
  ServerSwitch sw;
  sw.host = "0.0.0.0";
  sw.port = 5001;
  sw.api_key = "secret";
  server.start(EngineConfig{}, sw, nullptr);
  EXPECT_EQ(server.status(), ServerSession::Status::Off);
  EXPECT_NE(server.error().find("load a model"), std::string::npos);
  server.start(EngineConfig{}, sw, engine);
  pump_until(queue, jobs, [&] { return server.status() == ServerSession::Status::On; });
  EXPECT_EQ(services.server_cfg.server.port, 5001);
  EXPECT_EQ(services.server_cfg.server.api_keys, std::vector<std::string>{"secret"});
  EXPECT_TRUE(services.server_cfg.server.launch_kobold_api);
  EXPECT_EQ(openai_base_url(server.active()), "http://localhost:5001/v1");
  services.server_log_lines = {"POST /v1/chat/completions 200"};
  server.poll();
  EXPECT_EQ(server.log().size(), 1u);
  server.stop();
  pump_until(queue, jobs, [&] { return server.status() == ServerSession::Status::Off; });
  EXPECT_FALSE(services.server_running());

  services.server_error = "port 5001 is in use";
  server.start(EngineConfig{}, sw, engine);
  pump_until(queue, jobs, [&] { return server.status() == ServerSession::Status::Off; });
  EXPECT_EQ(server.error(), "port 5001 is in use");
}

TEST(ServerSwitchTest, AddressesAndChecks) {
  ServerSwitch sw;
  EXPECT_EQ(openai_base_url(sw), "http://localhost:2242/v1");
  EXPECT_EQ(kobold_base_url(sw), "http://localhost:2242");
  sw.host = "::1";
  EXPECT_EQ(openai_base_url(sw), "http://[::1]:2242/v1");
  sw.port = 0;
  EXPECT_NE(check_server_switch(sw), "");
}

}  // namespace
}  // namespace cypris
