// The nesting-depth requests of issue #26 item 1 (see hostile_guided.h).
#include "tests/support/hostile_guided.h"

#include <nlohmann/json.hpp>

namespace cypris::testing_support {

namespace {

using nlohmann::json;

std::string rep(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * n);
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// JSON texts spliced into bodies (building them as nlohmann values would nest the test's own
// recursion as deep).
std::string nested_objects(int depth) {
  return rep(R"({"type":"object","properties":{"a":)", depth) + R"({"type":"integer"})" + rep("}}", depth);
}
std::string nested_arrays(int depth) {
  return rep(R"({"type":"array","items":)", depth) + R"({"type":"integer"})" + rep("}", depth);
}
std::string tools_body(const std::string& parameters, const std::string& tool_choice) {
  return R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"tools":[{"type":"function","function":)"
         R"({"name":"f","parameters":)" +
         parameters + "}}],\"tool_choice\":" + tool_choice + "}";
}
std::string str(const std::string& s) { return json(s).dump(); }

}  // namespace

std::vector<HostileGuidedCase> hostile_guided_cases() {
  const std::string groups20k = rep("(", 20000) + "a" + rep(")", 20000);
  const std::string groups30k = rep("(", 30000) + "a" + rep(")", 30000);
  const std::string comp = "/v1/completions", chat = "/v1/chat/completions";
  const std::string p = R"({"prompt":"Once","max_tokens":8,)";
  const std::string m = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":8,)";
  // A parameters schema nested 300 deep: inside the body's JSON bound, past the schema limit.
  const std::string params300 = R"({"type":"object","properties":{"x":)" + nested_arrays(300) + "}}";
  const std::string params10k = R"({"type":"object","properties":{"x":)" + nested_objects(10000) + "}}";
  return {
      {"regex_groups_20k", comp, p + "\"guided_regex\":" + str(groups20k) + "}"},
      {"regex_star_run_50k", comp, p + "\"guided_regex\":" + str("a" + rep("*", 50000)) + "}"},
      {"chat_regex_groups_20k", chat, m + "\"guided_regex\":" + str(groups20k) + "}"},
      {"gbnf_groups_20k", comp, p + "\"guided_grammar\":" + str("root ::= " + rep("(", 20000) + "\"a\"" + rep(")", 20000)) + "}"},
      {"gbnf_groups_100k", comp, p + "\"grammar\":" + str("root ::= " + rep("(", 100000) + "\"a\"" + rep(")", 100000)) + "}"},
      {"gbnf_star_run_50k", comp, p + "\"grammar\":" + str("root ::= \"a\"" + rep("*", 50000)) + "}"},
      {"gbnf_question_run_100k", comp, p + "\"grammar_string\":" + str("root ::= \"a\"" + rep("?", 100000)) + "}"},
      {"lark_groups_20k", comp, p + "\"guided_grammar\":" + str("start: " + rep("(", 20000) + "\"a\"" + rep(")", 20000)) + "}"},
      {"lark_brackets_100k", comp, p + "\"guided_grammar\":" + str("start: " + rep("[", 100000) + "\"a\"" + rep("]", 100000)) + "}"},
      {"lark_star_run_50k", comp, p + "\"guided_grammar\":" + str("start: \"a\"" + rep("*", 50000)) + "}"},
      {"lark_question_run_100k", chat, m + "\"guided_grammar\":" + str("start: \"a\"" + rep("?", 100000)) + "}"},
      {"response_format_objects_10k", chat,
       m + R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)" + nested_objects(10000) + "}}}"},
      {"response_format_arrays_1000", comp,
       p + R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)" + nested_arrays(1000) + "}}}"},
      {"guided_json_objects_10k", comp, p + "\"guided_json\":" + nested_objects(10000) + "}"},
      {"guided_json_string_arrays_30k", comp, p + "\"guided_json\":" + str(nested_arrays(30000)) + "}"},
      {"guided_json_string_arrays_1000", chat, m + "\"guided_json\":" + str(nested_arrays(1000)) + "}"},
      {"schema_pattern_groups_30k", comp,
       p + "\"guided_json\":" + json{{"type", "string"}, {"pattern", groups30k}}.dump() + "}"},
      {"chat_schema_pattern_groups_30k", chat,
       m + R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)" +
           json{{"type", "string"}, {"pattern", groups30k}}.dump() + "}}}"},
      {"whitespace_pattern_groups_30k", comp,
       p + R"("response_format":{"type":"json_object"},"guided_whitespace_pattern":)" + str(groups30k) + "}"},
      {"tools_named_10k", chat, tools_body(params10k, R"({"type":"function","function":{"name":"f"}})")},
      {"tools_required_10k", chat, tools_body(params10k, R"("required")")},
      {"tools_named_300", chat, tools_body(params300, R"({"type":"function","function":{"name":"f"}})")},
      {"tools_required_300_with_whitespace_pattern", chat,
       tools_body(params300, R"("required","guided_whitespace_pattern":" ?")")},
      {"kobold_generate_grammar_100k", "/api/v1/generate",
       R"({"prompt":"Once","max_length":8,"grammar":)" + str("root ::= " + rep("(", 100000) + "\"a\"" + rep(")", 100000)) + "}"},
      {"kobold_stream_grammar_100k", "/api/extra/generate/stream",
       R"({"prompt":"Once","max_length":8,"grammar":)" + str("root ::= " + rep("(", 100000) + "\"a\"" + rep(")", 100000)) + "}"},
  };
}

}  // namespace cypris::testing_support
