// The options form: per-field checking against the option table, whole-config validation before a
// load, and profiles.
#include "app/ui/state/options_form.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace cypris {
namespace {

using json = nlohmann::json;

TEST(OptionsForm, ShowsEveryOptionOfTheTableExceptTheAppSwitches) {
  size_t shown = 0;
  for (const auto& g : OptionsForm::groups()) shown += OptionsForm::options_in(g).size();
  EXPECT_EQ(shown, option_table().size() - 2);  // --no-ui and --config have no meaning in the app
  for (const auto& g : OptionsForm::groups()) {
    for (const OptionSpec* s : OptionsForm::options_in(g)) {
      EXPECT_NE(s->name, "no-ui");
      EXPECT_NE(s->name, "config");
    }
  }
}

TEST(OptionsForm, BadValueKeepsTheConfigAndReportsTheField) {
  OptionsForm f;
  EXPECT_FALSE(f.set_text("max-num-seqs", "many"));
  ASSERT_TRUE(f.field_error("max_num_seqs").has_value());
  EXPECT_NE(f.field_error("max_num_seqs")->find("--max-num-seqs"), std::string::npos);
  EXPECT_EQ(f.config().scheduler.max_num_seqs, 256);
  EXPECT_FALSE(f.validate().ok);  // a pending field error blocks loading
  EXPECT_TRUE(f.set_text("max-num-seqs", "8"));
  EXPECT_FALSE(f.field_error("max_num_seqs").has_value());
  EXPECT_EQ(f.config().scheduler.max_num_seqs, 8);
}

TEST(OptionsForm, RangesAndChoicesComeFromTheTable) {
  OptionsForm f;
  EXPECT_FALSE(f.set_value("gpu-memory-utilization", 1.5));
  EXPECT_FALSE(f.set_value("dtype", "float8"));
  EXPECT_TRUE(f.set_value("dtype", "bfloat16"));
  EXPECT_EQ(f.config().model.dtype, "bfloat16");
  EXPECT_TRUE(f.set_text("served-model-name", "a, b"));
  EXPECT_EQ(f.config().model.served_model_name, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.text(*find_option("served-model-name")), "a, b");
  EXPECT_TRUE(f.set_text("max-model-len", ""));  // optional: empty = unset
  EXPECT_FALSE(f.config().model.max_model_len.has_value());
}

TEST(OptionsForm, ValidationFlagsNotYetOptionsAndCrossOptionRules) {
  OptionsForm f;
  EXPECT_FALSE(f.validate().ok);  // no model chosen yet
  EXPECT_NE(f.validate().error.find("model"), std::string::npos);
  ASSERT_TRUE(f.set_text("model", "/models/tiny"));
  EXPECT_TRUE(f.validate().ok) << f.validate().error;
  ASSERT_TRUE(f.set_value("num-scheduler-steps", 4));  // a feature that does not exist yet
  EXPECT_FALSE(f.validate().ok);
  EXPECT_NE(f.validate().error.find("num-scheduler-steps"), std::string::npos) << f.validate().error;
  f.reset("num-scheduler-steps");
  EXPECT_TRUE(f.validate().ok);
  ASSERT_TRUE(f.set_value("max-num-batched-tokens", 16));  // fewer than --max-num-seqs 256
  EXPECT_FALSE(f.validate().ok);
  EXPECT_NE(f.validate().error.find("--max-num-batched-tokens"), std::string::npos);
}

TEST(OptionsForm, ProfilesRoundTripAndABadProfileChangesNothing) {
  auto dir = std::filesystem::temp_directory_path() / "cypris_ui_profiles_test";
  std::filesystem::remove_all(dir);
  OptionsForm f;
  f.set_text("model", "org/model");
  f.set_value("max-num-seqs", 4);
  f.save_profile((dir / "small.json").string());
  EXPECT_EQ(list_profiles(dir.string()), std::vector<std::string>{"small"});

  OptionsForm g;
  g.set_value("block-size", 32);
  g.load_profile((dir / "small.json").string());
  EXPECT_EQ(g.config().model.model, "org/model");
  EXPECT_EQ(g.config().scheduler.max_num_seqs, 4);
  EXPECT_EQ(g.config().cache.block_size, 16);  // a profile is complete: not merged

  {
    std::ofstream bad(dir / "bad.json");
    bad << R"({"model": "x", "max_num_seqs": "lots"})";
  }
  try {
    g.load_profile((dir / "bad.json").string());
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
  EXPECT_EQ(g.config().model.model, "org/model");
  std::filesystem::remove_all(dir);
}

TEST(OptionsForm, ChangedCountAndResetAll) {
  OptionsForm f;
  EXPECT_EQ(f.changed_count(), 0u);
  f.set_text("model", "m");
  f.set_value("seed", 5);
  EXPECT_EQ(f.changed_count(), 2u);
  f.reset_all();
  EXPECT_EQ(f.changed_count(), 0u);
}

}  // namespace
}  // namespace cypris
