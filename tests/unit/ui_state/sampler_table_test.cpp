// The sampler controls against Aphrodite's documented defaults (aphrodite-engine-options.txt,
// sampler-notes.md: the "disabled" value of each sampler), value checking, request JSON and the
// shipped presets.
#include "app/ui/state/sampler_table.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/request/sampling_params.h"

namespace cypris {
namespace {

using json = nlohmann::json;

TEST(SamplerTable, DefaultsAreTheDisabledValuesOfTheReference) {
  const std::map<std::string, json> expected = {{"temperature", 1.0},
                                                {"top_p", 1.0},
                                                {"top_k", -1},
                                                {"min_p", 0.0},
                                                {"top_a", 0.0},
                                                {"tfs", 1.0},
                                                {"typical_p", 1.0},
                                                {"eta_cutoff", 0.0},
                                                {"epsilon_cutoff", 0.0},
                                                {"repetition_penalty", 1.0},
                                                {"presence_penalty", 0.0},
                                                {"frequency_penalty", 0.0},
                                                {"dynatemp_min", 0.0},
                                                {"dynatemp_max", 0.0},
                                                {"dynatemp_exponent", 1.0},
                                                {"smoothing_factor", 0.0},
                                                {"smoothing_curve", 1.0},
                                                {"mirostat_mode", 0},
                                                {"xtc_threshold", 0.1},
                                                {"xtc_probability", 0.0},
                                                {"nsigma", 0.0},
                                                {"dry_multiplier", 0.0},
                                                {"dry_base", 1.75},
                                                {"dry_allowed_length", 2},
                                                {"dry_range", 0},
                                                {"no_repeat_ngram_size", 0},
                                                {"skew", 0.0},
                                                {"temperature_last", false},
                                                {"skip_special_tokens", true},
                                                {"spaces_between_special_tokens", true},
                                                {"ignore_eos", false}};
  SamplerSettings s;
  for (const auto& [k, v] : expected) {
    ASSERT_NE(find_sampler(k), nullptr) << k;
    EXPECT_EQ(s.get(k), v) << k;
  }
  EXPECT_EQ(s.get("dry_sequence_breakers"), json::array({"\n", ":", "\"", "*"}));
  EXPECT_EQ(s.get("max_tokens"), 512);       // the chat's own default
  EXPECT_TRUE(s.get("logprobs").is_null());  // optional: unset
}

TEST(SamplerTable, CoversEverySamplingParameterOfTheEngine) {
  for (const auto& info : sampling_param_table()) {
    EXPECT_NE(find_sampler(std::string(info.name)), nullptr) << info.name;
  }
  EXPECT_EQ(sampler_table().size(), sampling_param_table().size());
  EXPECT_EQ(sampler_groups().front(), "Common");
  EXPECT_EQ(sampler_table().front().key, "max_tokens");
}

TEST(SamplerTable, ListsBiasAndOrderAreChecked) {
  SamplerSettings s;
  s.set("logit_bias", json{{"42", -100}, {"7", 2.5}});
  EXPECT_THROW(s.set("logit_bias", json{{"42", -101}}), std::exception);
  EXPECT_THROW(s.set("logit_bias", json{{"x", 1}}), std::exception);
  EXPECT_THROW(s.set("sampler_priority", json::array({"TEMPERATURE"})), std::exception);  // must list all 14
  EXPECT_THROW(s.set("custom_token_bans", json::array({-1})), std::exception);
  s.set("logprobs", 5);
  s.set("logprobs", nullptr);
  EXPECT_THROW(s.set("temperature", nullptr), std::exception);  // not optional
  EXPECT_EQ(s.to_request_json().at("logit_bias"), json({{"42", -100}, {"7", 2.5}}));
  EXPECT_FALSE(s.to_request_json().contains("logprobs"));
}

TEST(SamplerTable, EverySliderRangeLiesWithinTheHardLimits) {
  for (const auto& s : sampler_table()) {
    if (s.type != SamplerType::Float && s.type != SamplerType::Int) continue;
    EXPECT_LT(s.slider_min, s.slider_max) << s.key;
    if (s.min) EXPECT_GE(s.slider_min, *s.min) << s.key;
    if (s.max) EXPECT_LE(s.slider_max, *s.max) << s.key;
    SamplerSettings probe;
    EXPECT_NO_THROW(probe.set(s.key, s.default_value)) << s.key;
  }
}

TEST(SamplerTable, RejectsValuesOutsideTheLimitsNamingTheKey) {
  SamplerSettings s;
  try {
    s.set("top_p", 1.5, "preset.json");
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("preset.json: 'top_p'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.set("dry_base", 1.0), std::exception);  // must be > 1
  EXPECT_THROW(s.set("temperature", "hot"), std::exception);
  EXPECT_THROW(s.set("mirostat_mode", 1), std::exception);  // only 0 or 2
  EXPECT_THROW(s.set("no_such_sampler", 1), std::exception);
  EXPECT_DOUBLE_EQ(s.get("top_p").get<double>(), 1.0);  // unchanged
  s.set("mirostat_mode", 2);
  EXPECT_EQ(s.get("mirostat_mode"), 2);
}

TEST(SamplerTable, RequestJsonHoldsChangedValuesAndMaxTokens) {
  SamplerSettings s;
  EXPECT_EQ(s.to_request_json(), json({{"max_tokens", 512}}));
  s.set("temperature", 0.7);
  s.set("stop", json::array({"\nUser:"}));
  s.set("early_stopping", "never");
  json j = s.to_request_json();
  EXPECT_EQ(j.at("temperature"), 0.7);
  EXPECT_EQ(j.at("stop"), json::array({"\nUser:"}));
  EXPECT_EQ(j.at("early_stopping"), "never");
  EXPECT_FALSE(j.contains("seed"));  // -1: random, left out
  s.set("early_stopping", "true");
  EXPECT_EQ(s.to_request_json().at("early_stopping"), true);
}

TEST(SamplerPresets, ShippedPresetsLoadAndDoWhatTheySay) {
  std::vector<std::string> errors;
  auto presets = load_sampler_presets(std::string(CYPRIS_SOURCE_DIR) + "/resources/sampler_presets", &errors);
  EXPECT_TRUE(errors.empty()) << errors.front();
  std::map<std::string, SamplerPreset> by_name;
  for (const auto& p : presets) by_name[p.name] = p;
  ASSERT_TRUE(by_name.count("Default"));
  ASSERT_TRUE(by_name.count("Deterministic (greedy)"));
  ASSERT_TRUE(by_name.count("Creative"));
  ASSERT_TRUE(by_name.count("Min-P"));
  SamplerSettings s;
  s.set("temperature", 0.3);
  s.apply_preset(by_name["Default"].json, "Default");
  EXPECT_EQ(s.get("temperature"), 1.0);  // a preset resets what it does not set
  s.apply_preset(by_name["Deterministic (greedy)"].json, "greedy");
  EXPECT_EQ(s.get("temperature"), 0.0);
  s.apply_preset(by_name["Min-P"].json, "min-p");
  EXPECT_EQ(s.get("min_p"), 0.1);
}

TEST(SamplerPresets, SaveLoadRoundTripAndBadFilesNameTheFile) {
  auto dir = std::filesystem::temp_directory_path() / "cypris_ui_presets_test";
  std::filesystem::remove_all(dir);
  SamplerSettings s;
  s.set("min_p", 0.2);
  s.set("dry_multiplier", 0.5);
  save_sampler_preset((dir / "mine.json").string(), s, "Mine");
  {
    std::ofstream bad(dir / "bad.json");
    bad << R"({"name": "Bad", "values": {"temprature": 1}})";
  }
  std::vector<std::string> errors;
  auto presets = load_sampler_presets(dir.string(), &errors);
  ASSERT_EQ(presets.size(), 1u);
  EXPECT_EQ(presets[0].name, "Mine");
  SamplerSettings t;
  t.apply_preset(presets[0].json, "mine");
  EXPECT_EQ(t.get("min_p"), 0.2);
  EXPECT_EQ(t.get("dry_multiplier"), 0.5);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("bad.json"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("temprature"), std::string::npos) << errors[0];
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cypris
