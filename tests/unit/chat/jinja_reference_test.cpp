// Differential test: language snippets (tests/fixtures/chat_template/jinja_snippets.json) render
// exactly as Python Jinja2 renders them when set up like transformers
// (tests/tools/jinja_reference.py), and fail where Jinja2 fails.
#include <gtest/gtest.h>

#include <fstream>

#include "engine/chat/chat_template.h"
#include "engine/chat/jinja/globals.h"
#include "engine/chat/jinja/interpreter.h"
#include "engine/chat/jinja/parser.h"
#include "engine/common/error.h"

namespace cypris {
namespace {

std::tm fixed_time() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_wday = 5;
  tm.tm_yday = 207;
  return tm;
}

// Renders `source` with the JSON object `context` as its variables.
std::string render_with(const std::string& source, const nlohmann::ordered_json& context) {
  ChatTemplate tmpl(source);
  ChatTemplateInputs in;
  in.extra = context;
  in.clock = fixed_time;
  // ChatTemplate always defines messages etc.; snippets that read them pass their own.
  nlohmann::ordered_json messages =
      context.contains("messages") ? context["messages"] : nlohmann::ordered_json::array();
  return tmpl.render(messages, in);
}

TEST(JinjaReference, SnippetsMatchPythonJinja2) {
  std::ifstream f(std::string(CYPRIS_FIXTURES_DIR) + "/chat_template/jinja_snippets.json");
  ASSERT_TRUE(f) << "missing fixture";
  auto snippets = nlohmann::ordered_json::parse(f);
  ASSERT_GT(snippets.size(), 80u);
  for (const auto& s : snippets) {
    const std::string tmpl = s["template"].get<std::string>();
    SCOPED_TRACE(tmpl);
    if (s.contains("error")) {
      EXPECT_THROW(render_with(tmpl, s["context"]), Error) << "Jinja2: " << s["error"].get<std::string>();
      continue;
    }
    try {
      EXPECT_EQ(render_with(tmpl, s["context"]), s["expected"].get<std::string>());
    } catch (const Error& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
}

}  // namespace
}  // namespace cypris
