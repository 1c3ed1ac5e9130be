// Tool calls on /v1/chat/completions against the real engine (stories260k, CPU) through HTTP:
//  - tool_choice named and "required" are enforced by a grammar; every finished call's arguments
//    are validated against that tool's parameters schema by python3-jsonschema (the judge the
//    GuidedServer tests use), streamed and not, and a streamed answer rebuilds to the same calls as
//    the same seed unstreamed;
//  - tool_choice "auto" with the hermes parser reads calls out of free text (the text is steered by
//    a guided_regex so that this tiny story model writes one);
//  - request validation: 400s naming the field;
//  - a conversation with an assistant tool call and a `role: tool` answer renders through a chat
//    template that shows tools (Qwen2.5's), as /v1/tokenize sees it.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tests/support/stories_server.h"

namespace cypris {
namespace {

using nlohmann::json;

json tools_json() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome", "Tokyo"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "add_note",
      "parameters": {"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 12},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "maxItems": 3},
        "pinned": {"type": "boolean"}},
        "required": ["title"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "ping", "description": "No arguments."}}
  ])");
}

json schema_of(const std::string& name) {
  for (auto& t : tools_json()) {
    if (t["function"]["name"] == name) {
      return t["function"].contains("parameters") ? t["function"]["parameters"]
                                                  : json{{"type", "object"}, {"properties", json::object()}};
    }
  }
  return nullptr;
}

std::string read_file(const std::string& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct Call {
  std::string id, name, arguments;
};
struct Choice {
  std::optional<std::string> content;
  std::vector<Call> calls;
  std::string finish_reason;
};

class ToolServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing_support::StoriesServer(testing_support::start_stories_server([](EngineConfig& c) {
      c.server.enable_auto_tool_choice = true;
      c.server.tool_call_parser = "hermes";
    }));
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  static json base_body(json extra) {
    json body = {{"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
                 {"tools", tools_json()},
                 {"temperature", 1.0},
                 {"seed", 77},
                 {"max_tokens", 120}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return body;
  }

  static std::pair<int, json> post(const json& body, int port = 0) {
    httplib::Client c("127.0.0.1", port ? port : server_->port);
    c.set_read_timeout(120);
    auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
    if (!r) return {0, nullptr};
    return {r->status, json::parse(r->body, nullptr, false)};
  }

  // Non-streamed choices.
  static std::vector<Choice> chat(const json& body) {
    auto [status, j] = post(body);
    EXPECT_EQ(status, 200) << j.dump();
    std::vector<Choice> out;
    if (status != 200) return out;
    for (auto& ch : j["choices"]) {
      Choice c;
      const json& m = ch["message"];
      if (!m["content"].is_null()) c.content = m["content"].get<std::string>();
      for (auto& tc : m["tool_calls"]) {
        EXPECT_EQ(tc["type"], "function");
        c.calls.push_back({tc["id"], tc["function"]["name"], tc["function"]["arguments"]});
      }
      c.finish_reason = ch["finish_reason"];
      out.push_back(std::move(c));
    }
    return out;
  }

  // Streamed choices, rebuilt from the deltas as a client does; checks the deltas' shape.
  static std::vector<Choice> chat_stream(json body) {
    body["stream"] = true;
    httplib::Client c("127.0.0.1", server_->port);
    c.set_read_timeout(120);
    auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
    std::vector<Choice> out(size_t(body.value("n", 1)));
    if (!r) {
      ADD_FAILURE() << "no response";
      return out;
    }
    EXPECT_EQ(r->status, 200) << r->body;
    std::istringstream lines(r->body);
    std::string line;
    bool done = false;
    while (std::getline(lines, line)) {
      if (line.rfind("data: ", 0) != 0) continue;
      const std::string data = line.substr(6);
      if (data == "[DONE]") {
        done = true;
        continue;
      }
      json j = json::parse(data);
      EXPECT_FALSE(j.contains("error")) << data;
      for (auto& ch : j["choices"]) {
        Choice& o = out.at(ch["index"].get<size_t>());
        const json& d = ch["delta"];
        if (d.contains("content") && d["content"].is_string() && !d.contains("role")) {
          o.content = o.content.value_or("") + d["content"].get<std::string>();
        }
        if (d.contains("tool_calls")) {
          for (auto& tc : d["tool_calls"]) {
            const size_t k = tc["index"];
            if (tc.contains("id")) {
              EXPECT_EQ(k, o.calls.size()) << "a call's first delta comes once, in order: " << data;
              EXPECT_EQ(tc["type"], "function");
              o.calls.push_back({tc["id"], tc["function"]["name"], tc["function"].value("arguments", "")});
            } else {
              if (k >= o.calls.size()) {
                ADD_FAILURE() << "arguments before the call's first delta: " << data;
                continue;
              }
              EXPECT_FALSE(tc["function"].contains("name"));
              o.calls[k].arguments += tc["function"]["arguments"].get<std::string>();
            }
          }
        }
        if (!ch["finish_reason"].is_null()) o.finish_reason = ch["finish_reason"];
      }
    }
    EXPECT_TRUE(done);
    return out;
  }

  // Every finished choice's calls: names among the tools, ids OpenAI-shaped, arguments valid per
  // python3-jsonschema against the named tool's schema. Returns how many calls were judged.
  static size_t judge(const std::vector<Choice>& choices, const std::string& finished_reason,
                      const std::optional<std::string>& only_name = std::nullopt) {
    std::map<std::string, json> by_tool;  // name -> {outputs}
    size_t judged = 0;
    for (const auto& c : choices) {
      if (c.finish_reason == "length") continue;  // cut by max_tokens: not complete
      EXPECT_EQ(c.finish_reason, finished_reason);
      EXPECT_FALSE(c.content) << *c.content;
      EXPECT_GE(c.calls.size(), 1u);
      for (const auto& call : c.calls) {
        EXPECT_EQ(call.id.rfind("chatcmpl-tool-", 0), 0u) << call.id;
        EXPECT_FALSE(schema_of(call.name).is_null()) << call.name;
        if (only_name) EXPECT_EQ(call.name, *only_name);
        by_tool[call.name].push_back(call.arguments);
        ++judged;
      }
    }
    std::vector<json> cases;
    for (auto& [name, outs] : by_tool) {
      cases.push_back({{"kind", "jsonschema"},
                       {"spec", schema_of(name)},
                       {"outputs", outs},
                       {"finished", std::vector<bool>(outs.size(), true)}});
    }
    if (cases.empty()) return 0;
    const int rc = testing_support::run_guided_judge(cases);
    if (rc == 77) return judged;  // no python3-jsonschema: the structure was still checked
    EXPECT_EQ(rc, 0) << "see the INVALID lines above";
    return judged;
  }

  static testing_support::StoriesServer* server_;
};
testing_support::StoriesServer* ToolServer::server_ = nullptr;

json named(const std::string& f) {
  return {{"type", "function"}, {"function", {{"name", f}}}};
}

TEST_F(ToolServer, NamedFunctionArgumentsValidate) {
  for (const char* f : {"get_weather", "add_note", "ping"}) {
    const json body = base_body({{"tool_choice", named(f)}, {"n", 4}});
    auto plain = chat(body);
    ASSERT_EQ(plain.size(), 4u);
    EXPECT_GE(judge(plain, "stop", f), 3u) << f;
    auto streamed = chat_stream(body);
    ASSERT_EQ(streamed.size(), 4u);
    judge(streamed, "stop", f);
    // The same seed gives the same calls, streamed or not.
    for (size_t i = 0; i < plain.size(); ++i) {
      ASSERT_EQ(streamed[i].calls.size(), plain[i].calls.size()) << f;
      for (size_t k = 0; k < plain[i].calls.size(); ++k) {
        EXPECT_EQ(streamed[i].calls[k].name, plain[i].calls[k].name);
        EXPECT_EQ(streamed[i].calls[k].arguments, plain[i].calls[k].arguments);
      }
    }
  }
}

TEST_F(ToolServer, RequiredGivesCallsOfTheTools) {
  // One call per answer (parallel_tool_calls false: the grammar's array has one item), then any
  // number: a bias towards ']' and single spaces between JSON tokens let the story model end the
  // array within max_tokens.
  json bias = json::object();
  {
    httplib::Client c("127.0.0.1", server_->port);
    auto t = c.Post("/v1/tokenize", json{{"prompt", "]"}, {"add_special_tokens", false}}.dump(), "application/json");
    ASSERT_TRUE(t && t->status == 200);
    bias[std::to_string(json::parse(t->body)["tokens"].back().get<int>())] = 8;
  }
  for (const json& extra : {json{{"parallel_tool_calls", false}},
                            json{{"logit_bias", bias}, {"max_tokens", 200}, {"guided_whitespace_pattern", " ?"}}}) {
    json body = base_body({{"tool_choice", "required"}, {"n", 6}});
    for (auto& [k, v] : extra.items()) body[k] = v;
    auto plain = chat(body);
    ASSERT_EQ(plain.size(), 6u);
    EXPECT_GE(judge(plain, "tool_calls"), 4u) << extra.dump();
    if (extra.contains("parallel_tool_calls")) {
      for (auto& c : plain) EXPECT_LE(c.calls.size(), 1u);
    }
    auto streamed = chat_stream(body);
    judge(streamed, "tool_calls");
    for (size_t i = 0; i < plain.size(); ++i) {
      // An answer cut by max_tokens: unstreamed, its complete calls; streamed, also the started one.
      ASSERT_EQ(streamed[i].finish_reason, plain[i].finish_reason);
      if (plain[i].finish_reason == "length") continue;
      ASSERT_EQ(streamed[i].calls.size(), plain[i].calls.size());
      for (size_t k = 0; k < plain[i].calls.size(); ++k) {
        EXPECT_EQ(streamed[i].calls[k].name, plain[i].calls[k].name);
        EXPECT_EQ(json::parse(streamed[i].calls[k].arguments), json::parse(plain[i].calls[k].arguments));
      }
    }
  }
}

// Issue #32: an answer cut by max_tokens returns the calls it completed (finish_reason "length"),
// not the unfinished array as content. A bias towards ',' keeps the array growing, so every answer
// is cut with complete calls before the cut.
TEST_F(ToolServer, CutShortAnswerReturnsItsCompleteCalls) {
  json bias = json::object();
  {
    httplib::Client c("127.0.0.1", server_->port);
    auto t = c.Post("/v1/tokenize", json{{"prompt", ","}, {"add_special_tokens", false}}.dump(), "application/json");
    ASSERT_TRUE(t && t->status == 200);
    bias[std::to_string(json::parse(t->body)["tokens"].back().get<int>())] = 8;
  }
  const json body = base_body({{"tool_choice", "required"}, {"n", 4}, {"max_tokens", 160}, {"logit_bias", bias}});
  auto plain = chat(body);
  ASSERT_EQ(plain.size(), 4u);
  size_t cut = 0;
  for (auto& c : plain) {
    if (c.finish_reason != "length") continue;
    ++cut;
    EXPECT_FALSE(c.content) << *c.content;
    EXPECT_GE(c.calls.size(), 1u);
    c.finish_reason = "tool_calls";  // judge the returned calls as complete ones
  }
  EXPECT_GE(cut, 3u) << "the bias should cut most answers";
  EXPECT_GE(judge(plain, "tool_calls"), cut);
}

TEST_F(ToolServer, AutoReadsHermesCallsOutOfTheText) {
  // The story model does not call tools by itself: a regex makes it write the hermes format.
  const json body = base_body(
      {{"tool_choice", "auto"},
       {"n", 3},
       {"guided_regex",
        "Let me check\\. <tool_call>\\{\"name\": \"get_weather\", \"arguments\": \\{\"city\": \"(Paris|Rome)\", "
        "\"days\": [1-7]\\}\\}</tool_call>"}});
  for (bool stream : {false, true}) {
    auto choices = stream ? chat_stream(body) : chat(body);
    ASSERT_EQ(choices.size(), 3u);
    for (auto& c : choices) {
      EXPECT_EQ(c.finish_reason, "tool_calls");
      // (The chat answer starts with the "\n" the ChatML prompt ended with: a detokenizer quirk of
      // this SentencePiece model that plain chat has too.)
      std::string content = c.content.value_or("");
      content.erase(0, content.find_first_not_of('\n'));
      EXPECT_EQ(content, "Let me check.");
      ASSERT_EQ(c.calls.size(), 1u);
      EXPECT_EQ(c.calls[0].name, "get_weather");
      json args = json::parse(c.calls[0].arguments);
      EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Rome") << args.dump();
      EXPECT_EQ(c.calls[0].id.rfind("chatcmpl-tool-", 0), 0u);
    }
  }
  // Text without a call stays content.
  auto plain = chat(base_body({{"tool_choice", "auto"}, {"max_tokens", 20}}));
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_TRUE(plain[0].calls.empty());
  EXPECT_TRUE(plain[0].content && !plain[0].content->empty());
  EXPECT_NE(plain[0].finish_reason, "tool_calls");
}

TEST_F(ToolServer, BadToolRequestsAre400NamingTheField) {
  auto expect_400 = [&](json body, const std::string& field, const std::string& words, int port = 0) {
    auto [status, j] = post(body, port);
    EXPECT_EQ(status, 400) << body.dump() << " -> " << j.dump();
    EXPECT_EQ(j["error"]["param"], field) << j.dump();
    EXPECT_NE(j["error"]["message"].get<std::string>().find(words), std::string::npos) << j.dump();
  };
  json msgs = {{{"role", "user"}, {"content", "hi"}}};
  expect_400({{"messages", msgs}, {"tools", json::array({json{{"type", "function"}}})}}, "tools",
             "function must be an object");
  expect_400({{"messages", msgs}, {"tools", "get_weather"}}, "tools", "must be an array");
  expect_400({{"messages", msgs}, {"tools", {{{"type", "function"}, {"function", {{"description", "x"}}}}}}}, "tools",
             "name must be a non-empty string");
  expect_400({{"messages", msgs},
              {"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "array"}}}}}}}}},
             "tools", "must describe an object");
  expect_400({{"messages", msgs}, {"tools", {{{"type", "retrieval"}, {"function", {{"name", "f"}}}}}}}, "tools",
             "must be \"function\"");
  json dup = tools_json();
  dup.push_back(dup[0]);
  expect_400({{"messages", msgs}, {"tools", dup}}, "tools", "used twice");
  expect_400({{"messages", msgs}, {"tools", tools_json()}, {"tool_choice", named("nope")}}, "tool_choice",
             "\"nope\", which is not in 'tools'");
  expect_400({{"messages", msgs}, {"tool_choice", "required"}}, "tool_choice", "needs 'tools'");
  expect_400({{"messages", msgs}, {"tools", tools_json()}, {"tool_choice", "always"}}, "tool_choice", "\"always\"");
  expect_400({{"messages", msgs}, {"tools", tools_json()}, {"tool_choice", {{"type", "function"}}}}, "tool_choice",
             "function.name");
  expect_400({{"messages", msgs}, {"tools", tools_json()}, {"tool_choice", "required"}, {"guided_regex", "a"}},
             "tool_choice", "cannot be combined");
  expect_400({{"messages", msgs}, {"tools", tools_json()}, {"parallel_tool_calls", "yes"}}, "parallel_tool_calls",
             "boolean");
  json unsupported = {{{"type", "function"},
                       {"function", {{"name", "f"}, {"parameters", {{"type", "object"}, {"not", json::object()}}}}}}};
  expect_400({{"messages", msgs}, {"tools", unsupported}, {"tool_choice", "required"}}, "tools", "not");

  // A server without --enable-auto-tool-choice: "auto" is refused naming the flag; tools alone
  // reach the template and the answer is text.
  auto plain = testing_support::start_stories_server();
  expect_400({{"messages", msgs}, {"tools", tools_json()}, {"tool_choice", "auto"}}, "tool_choice",
             "--enable-auto-tool-choice", plain.port);
  auto [status, j] = post({{"messages", msgs}, {"tools", tools_json()}, {"max_tokens", 5}}, plain.port);
  EXPECT_EQ(status, 200) << j.dump();
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"], json::array());
}

TEST_F(ToolServer, ToolResultRoundTripsThroughAToolTemplate) {
  const std::string tmpl =
      read_file(std::string(CYPRIS_TESTDATA_DIR) + "/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  ASSERT_FALSE(tmpl.empty());
  const json messages = json::parse(R"([
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "chatcmpl-tool-1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
    {"role": "tool", "tool_call_id": "chatcmpl-tool-1", "content": "Sunny, 24 C, light wind"}
  ])");
  httplib::Client c("127.0.0.1", server_->port);
  auto t = c.Post("/v1/tokenize", json{{"messages", messages}, {"tools", tools_json()}, {"chat_template", tmpl}}.dump(),
                  "application/json");
  ASSERT_TRUE(t);
  ASSERT_EQ(t->status, 200) << t->body;
  auto d = c.Post("/v1/detokenize", json{{"tokens", json::parse(t->body)["tokens"]}}.dump(), "application/json");
  ASSERT_TRUE(d && d->status == 200);
  const std::string prompt = json::parse(d->body)["prompt"];
  // The tools, the assistant's call with its arguments as an object, and the tool's answer.
  // (This client's JSON sorts keys: "function" comes before "type".)
  EXPECT_NE(
      prompt.find("<tools>\n{\"function\": {\"description\": \"The weather in a city.\", \"name\": \"get_weather\""),
      std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}"),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("<|im_start|>user\n<tool_response>\nSunny, 24 C, light wind\n</tool_response><|im_end|>"),
            std::string::npos)
      << prompt;
  EXPECT_TRUE(prompt.size() > 12 && prompt.substr(prompt.size() - 22) == "<|im_start|>assistant\n") << prompt;
}

}  // namespace
}  // namespace cypris
