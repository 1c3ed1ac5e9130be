// Renders every conversation of testdata/chat_templates with the real Hugging Face templates and
// compares with the renderings of @huggingface/jinja and Python Jinja2 (cases.jsonl), and checks
// that the conversations the templates reject fail with the template's message (errors.jsonl).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/chat/chat_template.h"
#include "engine/common/error.h"

namespace cypris {
namespace {

const std::filesystem::path kDir = std::filesystem::path(CYPRIS_TESTDATA_DIR) / "chat_templates";

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<nlohmann::ordered_json> read_cases(const char* file) {
  std::vector<nlohmann::ordered_json> out;
  std::ifstream in(kDir / file);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::ordered_json::parse(line));
  return out;
}

// The README's fixed moment: 2024-07-26 00:00:00, a Friday.
std::tm fixed_time() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_wday = 5;
  tm.tm_yday = 207;
  return tm;
}

ChatTemplateInputs inputs_of(const nlohmann::ordered_json& c) {
  ChatTemplateInputs in;
  in.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
  in.bos_token = c.at("bos_token").get<std::string>();
  in.eos_token = c.at("eos_token").get<std::string>();
  if (c.contains("tools")) in.tools = c.at("tools");
  in.clock = fixed_time;
  return in;
}

std::string case_name(const nlohmann::ordered_json& c) {
  return c.at("template").get<std::string>() + " / " + c.at("name").get<std::string>();
}

TEST(ChatTemplateCases, EveryCaseRendersExactly) {
  auto cases = read_cases("cases.jsonl");
  ASSERT_EQ(cases.size(), 121u) << "testdata missing: " << kDir;
  int passed = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(case_name(c));
    try {
      ChatTemplate tmpl(read_text(kDir / c.at("template").get<std::string>()));
      std::string out = tmpl.render(c.at("messages"), inputs_of(c));
      EXPECT_EQ(out, c.at("expected").get<std::string>());
      if (out == c.at("expected").get<std::string>()) ++passed;
    } catch (const Error& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
  EXPECT_EQ(passed, 121);
}

TEST(ChatTemplateCases, RejectedConversationsRaiseTheTemplateMessage) {
  auto cases = read_cases("errors.jsonl");
  ASSERT_EQ(cases.size(), 5u);
  for (const auto& c : cases) {
    SCOPED_TRACE(case_name(c));
    ChatTemplate tmpl(read_text(kDir / c.at("template").get<std::string>()));
    try {
      std::string out = tmpl.render(c.at("messages"), inputs_of(c));
      ADD_FAILURE() << "rendered instead of failing: " << out;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.at("error").get<std::string>()), std::string::npos) << e.what();
    }
  }
}

TEST(ChatTemplateCases, AllTemplatesParse) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
    if (entry.path().extension() != ".jinja") continue;
    SCOPED_TRACE(entry.path().filename().string());
    EXPECT_NO_THROW(ChatTemplate(read_text(entry.path())));
    ++n;
  }
  EXPECT_EQ(n, 14);
}

}  // namespace
}  // namespace cypris
