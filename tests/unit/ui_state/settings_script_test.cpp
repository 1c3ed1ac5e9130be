// Settings persistence in the XDG config folder, and the --ui-script parser.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "app/ui/state/settings.h"
#include "app/ui/state/ui_script.h"

namespace cypris {
namespace {

TEST(Settings, ConfigDirFollowsXdg) {
  const char* old = std::getenv("XDG_CONFIG_HOME");
  std::string saved = old ? old : "";
  setenv("XDG_CONFIG_HOME", "/tmp/xdg-test", 1);
  EXPECT_EQ(config_dir(), "/tmp/xdg-test/cypris");
  unsetenv("XDG_CONFIG_HOME");
  const char* home = std::getenv("HOME");
  if (home) EXPECT_EQ(config_dir(), std::string(home) + "/.config/cypris");
  if (old) setenv("XDG_CONFIG_HOME", saved.c_str(), 1);
}

TEST(Settings, RoundTripAndMissingFileGivesDefaults) {
  auto dir = std::filesystem::temp_directory_path() / "cypris_ui_settings_test";
  std::filesystem::remove_all(dir);
  const std::string path = settings_path(dir.string());
  AppSettings d = load_settings(path);
  EXPECT_EQ(d.server_port, 2242);
  AppSettings s;
  s.last_model = "org/model";
  s.system_prompt = "You are helpful.";
  s.server_port = 5001;
  s.local_folders = {"/models/a"};
  save_settings(path, s);
  AppSettings t = load_settings(path);
  EXPECT_EQ(t.last_model, "org/model");
  EXPECT_EQ(t.system_prompt, "You are helpful.");
  EXPECT_EQ(t.server_port, 5001);
  EXPECT_EQ(t.local_folders, std::vector<std::string>{"/models/a"});
  std::filesystem::remove_all(dir);
}

TEST(Settings, BadFilesNameTheKey) {
  auto dir = std::filesystem::temp_directory_path() / "cypris_ui_settings_bad";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "settings.json").string();
  { std::ofstream(path) << R"({"server_port": "2242"})"; }
  try {
    load_settings(path);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("server_port"), std::string::npos) << e.what();
  }
  { std::ofstream(path) << R"({"server_port": 70000})"; }
  EXPECT_THROW(load_settings(path), std::exception);
  { std::ofstream(path) << "{not json"; }
  EXPECT_THROW(load_settings(path), std::exception);
  std::filesystem::remove_all(dir);
}

TEST(UiScript, ParsesActions) {
  auto a = parse_ui_script(
      "# comment\nopen options\nset max-model-len 256\nload\nwait_loaded 30\n"
      "type Hello # not a comment\\nsecond line\nsend\nwait_reply\nscreenshot out/x.png\nquit 0\n",
      "s.txt");
  ASSERT_EQ(a.size(), 9u);
  EXPECT_EQ(a[0].kind, ScriptAction::Kind::Open);
  EXPECT_EQ(a[0].arg, "options");
  EXPECT_EQ(a[1].kind, ScriptAction::Kind::Set);
  EXPECT_EQ(a[1].arg, "max-model-len");
  EXPECT_EQ(a[1].value, "256");
  EXPECT_EQ(a[3].number, 30);
  EXPECT_EQ(a[4].arg, "Hello # not a comment\nsecond line");
  EXPECT_EQ(a[6].number, 120);  // default wait
  EXPECT_EQ(a[7].arg, "out/x.png");
  EXPECT_EQ(a[7].line, 9);
}

TEST(UiScript, StructuredOutputAction) {
  auto a = parse_ui_script("structured choice yes\\nno\nstructured off\n", "s");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].kind, ScriptAction::Kind::Structured);
  EXPECT_EQ(a[0].arg, "choice");
  EXPECT_EQ(a[0].value, "yes\nno");
  EXPECT_EQ(a[1].arg, "off");
  EXPECT_EQ(a[1].value, "");
  EXPECT_THROW(parse_ui_script("structured lark x\n", "s"), std::exception);
}

TEST(UiScript, HubActions) {
  auto a = parse_ui_script("hub_search tiny llama\nhub_repo org/m\ndownload\nwait_download\n", "s");
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0].kind, ScriptAction::Kind::HubSearch);
  EXPECT_EQ(a[0].arg, "tiny llama");
  EXPECT_EQ(a[1].arg, "org/m");
  EXPECT_EQ(a[3].kind, ScriptAction::Kind::WaitDownload);
  EXPECT_EQ(a[3].number, 600);
  EXPECT_THROW(parse_ui_script("hub_repo\n", "s"), std::exception);
}

TEST(UiScript, KeyboardTestActions) {
  auto a = parse_ui_script("wait_input a # b\\nc\nwait_chat_error load a model\n", "s");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].kind, ScriptAction::Kind::WaitInput);
  EXPECT_EQ(a[0].arg, "a # b\nc");
  EXPECT_EQ(a[1].kind, ScriptAction::Kind::WaitChatError);
  EXPECT_EQ(a[1].arg, "load a model");
}

TEST(UiScript, OptionsViewAction) {
  auto a = parse_ui_script("options_view advanced_all\noptions_view quick\n", "s");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].kind, ScriptAction::Kind::OptionsView);
  EXPECT_EQ(a[0].arg, "advanced_all");
  EXPECT_EQ(a[1].arg, "quick");
  EXPECT_THROW(parse_ui_script("options_view\n", "s"), std::exception);
  EXPECT_THROW(parse_ui_script("options_view sideways\n", "s"), std::exception);
}

TEST(UiScript, ErrorsNameFileAndLine) {
  try {
    parse_ui_script("open chat\nopen kitchen\n", "s.txt");
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("s.txt:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_ui_script("fly\n", "s"), std::exception);
  EXPECT_THROW(parse_ui_script("set model\n", "s"), std::exception);
  EXPECT_THROW(parse_ui_script("wait_reply soon\n", "s"), std::exception);
  EXPECT_THROW(parse_ui_script("send now\n", "s"), std::exception);
}

}  // namespace
}  // namespace cypris
