// The chat's structured-output field: what reaches the engine (the same guided spec the OpenAI route
// builds), errors with their position, the mode switch, debounced validation, presets.
#include "app/ui/state/structured_output.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "app/server/openai/sampling_from_json.h"
#include "app/ui/state/chat_session.h"
#include "app/ui/state/real_services.h"
#include "app/ui/state/sampler_table.h"
#include "tests/support/fake_services.h"
#include "tests/unit/ui_state/pump.h"

namespace cypris {
namespace {

using fake::FakeEngineClient;
using fake::FakeServices;
using fake::pump_until;
using nlohmann::json;

constexpr const char* kSchema =
    R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"]})";

struct StructuredChat : ::testing::Test {
  FakeServices services;
  UiQueue queue;
  BackgroundJobs jobs;
  double clock = 0.0;
  std::function<double()> now = [this] { return clock += 0.25; };
  std::shared_ptr<FakeEngineClient> engine = std::make_shared<FakeEngineClient>();
  void TearDown() override { jobs.shutdown(); }

  // Sends one message and returns the request JSON the engine got.
  json send(ChatSession& chat, const std::string& text = "Hi") {
    const size_t before = services.generate_calls.size();
    EXPECT_TRUE(chat.send(engine, text)) << chat.last_error();
    pump_until(queue, jobs, [&] { return !chat.transcript().generating(); });
    EXPECT_EQ(services.generate_calls.size(), before + 1);
    return services.generate_calls.back();
  }
};

TEST_F(StructuredChat, ValidSchemaRequestCarriesTheGuidedSpecOfTheOpenAIRoute) {
  ChatSession chat(services, queue, jobs, now);
  chat.samplers().set("temperature", 0.5);
  chat.samplers().structured() = {StructuredMode::JsonSchema, kSchema};
  const json req = send(chat);
  EXPECT_TRUE(chat.last_error().empty()) << chat.last_error();
  ASSERT_TRUE(req.contains("guided_json")) << req.dump();
  EXPECT_EQ(req.at("guided_json"), kSchema);
  EXPECT_EQ(req.at("temperature"), 0.5);

  // What the app hands the engine equals what /v1/chat/completions builds from the same field.
  const SamplingParams app = chat_sampling_params(req);
  const GuidedDecodingParams route = server::guided_from_json(json{{"guided_json", kSchema}});
  EXPECT_EQ(app.guided.kind, GuidedKind::JsonSchema);
  EXPECT_EQ(app.guided.text, kSchema);
  EXPECT_EQ(app.guided.cache_key(), route.cache_key());
  EXPECT_FLOAT_EQ(app.temperature, 0.5f);
}

TEST_F(StructuredChat, EveryModeMapsToItsRequestField) {
  ChatSession chat(services, queue, jobs, now);
  chat.samplers().structured() = {StructuredMode::Regex, "(yes|no)\\."};
  json req = send(chat);
  EXPECT_EQ(req.at("guided_regex"), "(yes|no)\\.");
  EXPECT_EQ(chat_sampling_params(req).guided.kind, GuidedKind::Regex);

  chat.samplers().structured() = {StructuredMode::Choice, "yes\r\nno thanks\n\n"};
  req = send(chat);
  EXPECT_EQ(req.at("guided_choice"), (json{"yes", "no thanks"}));
  EXPECT_EQ(chat_sampling_params(req).guided.choices, (std::vector<std::string>{"yes", "no thanks"}));

  chat.samplers().structured() = {StructuredMode::Gbnf, "root ::= \"a\" [0-9]+\n"};
  req = send(chat);
  EXPECT_EQ(req.at("grammar"), "root ::= \"a\" [0-9]+\n");
  EXPECT_EQ(chat_sampling_params(req).guided.kind, GuidedKind::Gbnf);
}

TEST_F(StructuredChat, InvalidRegexNamesThePositionAndIsLeftOutOfTheRequest) {
  const StructuredCheck c = check_structured_output({StructuredMode::Regex, "ab(c"});  // the open paren
  EXPECT_EQ(c.state, StructuredCheck::State::Invalid);
  EXPECT_NE(c.message.find("position 2"), std::string::npos) << c.message;
  EXPECT_TRUE(c.fields.empty());

  ChatSession chat(services, queue, jobs, now);
  chat.samplers().structured() = {StructuredMode::Regex, "ab(c"};
  const json req = send(chat);  // Send still works
  EXPECT_FALSE(req.contains("guided_regex")) << req.dump();
  EXPECT_FALSE(chat_sampling_params(req).guided.active());
  EXPECT_NE(chat.last_error().find("without structured output"), std::string::npos) << chat.last_error();
  EXPECT_NE(chat.last_error().find("position 2"), std::string::npos) << chat.last_error();
}

TEST_F(StructuredChat, OtherErrorsNameTheirPlace) {
  const StructuredCheck gbnf = check_structured_output({StructuredMode::Gbnf, "root ::= \"a\"\nx ::= (\n"});
  EXPECT_EQ(gbnf.state, StructuredCheck::State::Invalid);
  EXPECT_NE(gbnf.message.find("line 2"), std::string::npos) << gbnf.message;
  const StructuredCheck bad_json = check_structured_output({StructuredMode::JsonSchema, "{\"type\": \"object\",}"});
  EXPECT_EQ(bad_json.state, StructuredCheck::State::Invalid);
  EXPECT_NE(bad_json.message.find("column"), std::string::npos) << bad_json.message;
  const StructuredCheck keyword = check_structured_output({StructuredMode::JsonSchema, R"({"not": {}})"});
  EXPECT_EQ(keyword.state, StructuredCheck::State::Invalid);
  EXPECT_NE(keyword.message.find("not"), std::string::npos) << keyword.message;
}

TEST_F(StructuredChat, SwitchingTheModeOffSendsNoGuidedSpec) {
  ChatSession chat(services, queue, jobs, now);
  chat.samplers().structured() = {StructuredMode::JsonSchema, kSchema};
  EXPECT_TRUE(send(chat).contains("guided_json"));
  chat.samplers().structured().mode = StructuredMode::Off;  // the text stays for later
  const json req = send(chat);
  EXPECT_FALSE(req.contains("guided_json")) << req.dump();
  EXPECT_FALSE(chat_sampling_params(req).guided.active());
  EXPECT_TRUE(chat.last_error().empty());
  EXPECT_EQ(chat.samplers().structured().text, kSchema);
}

TEST(StructuredOutput, BlankTextEnforcesNothing) {
  for (StructuredMode m : {StructuredMode::JsonSchema, StructuredMode::Choice, StructuredMode::Gbnf}) {
    const StructuredCheck c = check_structured_output({m, " \n\n"});
    EXPECT_EQ(c.state, StructuredCheck::State::Empty) << structured_mode_key(m);
    EXPECT_TRUE(structured_request_fields({m, " \n\n"}).empty());
  }
  EXPECT_EQ(check_structured_output({StructuredMode::Regex, ""}).state, StructuredCheck::State::Empty);
  EXPECT_EQ(check_structured_output({StructuredMode::Off, kSchema}).state, StructuredCheck::State::Off);
}

TEST(StructuredOutput, ValidationWaitsForTheTextToSettle) {
  StructuredOutputValidator v(0.3);
  StructuredOutput f{StructuredMode::Regex, "a"};
  v.poll(f, 10.0);
  EXPECT_TRUE(v.pending(f));
  f.text = "ab(";  // typing
  v.poll(f, 10.1);
  v.poll(f, 10.2);
  EXPECT_EQ(v.compiles(), 0);
  v.poll(f, 10.45);  // quiet for 0.35 s
  EXPECT_EQ(v.compiles(), 1);
  EXPECT_FALSE(v.pending(f));
  EXPECT_EQ(v.result().state, StructuredCheck::State::Invalid);
  for (double t = 10.5; t < 12.0; t += 1.0 / 60) v.poll(f, t);  // frames without edits
  EXPECT_EQ(v.compiles(), 1);
  f.text = "ab(c)";
  EXPECT_EQ(v.validate(f).state, StructuredCheck::State::Valid);  // Send checks at once
  EXPECT_EQ(v.compiles(), 2);
  f.mode = StructuredMode::Off;
  v.poll(f, 12.0);  // off shows at once, without compiling
  EXPECT_FALSE(v.pending(f));
  EXPECT_EQ(v.result().state, StructuredCheck::State::Off);
  EXPECT_EQ(v.compiles(), 2);
}

TEST(StructuredOutput, PresetsSaveAndRestoreTheField) {
  auto dir = std::filesystem::temp_directory_path() / "cypris_ui_structured_presets_test";
  std::filesystem::remove_all(dir);
  SamplerSettings s;
  s.set("min_p", 0.2);
  s.structured() = {StructuredMode::Choice, "red\ngreen\nblue"};
  save_sampler_preset((dir / "colours.json").string(), s, "Colours");
  {
    std::ofstream bad(dir / "bad.json");
    bad << R"({"name": "Bad", "values": {}, "structured_output": {"mode": "lark", "text": "x"}})";
  }
  std::vector<std::string> errors;
  auto presets = load_sampler_presets(dir.string(), &errors);
  ASSERT_EQ(presets.size(), 1u);
  SamplerSettings t;
  t.apply_preset(presets[0].json, "colours");
  EXPECT_EQ(t.get("min_p"), 0.2);
  EXPECT_EQ(t.structured(), s.structured());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("bad.json"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("structured_output.mode"), std::string::npos) << errors[0];

  // A preset without the field (the shipped ones) changes the samplers and leaves the field.
  t.apply_preset(json{{"name", "plain"}, {"values", {{"temperature", 0.4}}}}, "plain");
  EXPECT_EQ(t.get("temperature"), 0.4);
  EXPECT_TRUE(t.is_default("min_p"));
  EXPECT_EQ(t.structured(), s.structured());
  // An explicit "off" in a saved preset switches it off.
  SamplerSettings off;
  t.apply_preset(off.to_preset("off"), "off");
  EXPECT_EQ(t.structured().mode, StructuredMode::Off);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cypris
