// Issue #26 item 1 at the route level: each of the 25 nesting-depth requests goes through the same
// parsing the route runs (body, tools, guided fields, Kobold mapping) and is refused 400 with a
// message that states the limit; the HTTP tests (GuidedServer.HostileNesting...) send them to a
// running server.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "app/server/errors.h"
#include "app/server/kobold/kobold_mapping.h"
#include "app/server/openai/chat_tools.h"
#include "app/server/openai/sampling_from_json.h"
#include "app/server/router.h"
#include "engine/common/json_depth.h"
#include "tests/support/hostile_guided.h"

namespace cypris::server {
namespace {

using testing_support::HostileGuidedCase;

// What the route does with the body before anything reaches the engine.
void parse_like_the_route(const HostileGuidedCase& c) {
  httplib::Request req;
  req.body = c.body;
  const nlohmann::json body = parse_json_body(req);
  if (c.route == "/v1/completions") {
    guided_from_json(body);
  } else if (c.route == "/v1/chat/completions") {
    ServerOptions o;
    const ChatTools tools = tools_from_json(nlohmann::ordered_json::parse(req.body), o);
    guided_from_json(body);
    std::optional<std::string> ws;
    if (auto it = body.find("guided_whitespace_pattern"); it != body.end() && it->is_string()) ws = it->get<std::string>();
    tool_guided_params(tools, ws);
  } else {
    const KoboldRequest kr = kobold_request_from_json(body, 80, 512);
    compile_guided(kr.params.guided, kr.guided_field);  // the route compiles after its cheap checks
  }
}

TEST(GuidedLimits, EveryHostileNestingShapeIsA400StatingTheLimit) {
  const auto cases = testing_support::hostile_guided_cases();
  EXPECT_EQ(cases.size(), 25u);
  for (const auto& c : cases) {
    int status = 0;
    std::string msg;
    try {
      parse_like_the_route(c);
    } catch (const HttpError& e) {
      status = e.status();
      msg = e.what();
    }
    EXPECT_EQ(status, 400) << c.name;
    EXPECT_TRUE(testing_support::states_nesting_limit(msg)) << c.name << ": " << msg.substr(0, 300);
    EXPECT_LT(msg.size(), 1000u) << c.name << ": the message echoes the input";
  }
}

TEST(GuidedLimits, BodiesNestedPastTheJsonBoundAre400) {
  httplib::Request req;
  req.body = "{\"prompt\":" + std::string(1000000, '[') + std::string(1000000, ']') + "}";
  int status = 0;
  std::string msg;
  try {
    parse_json_body(req);
  } catch (const HttpError& e) {
    status = e.status();
    msg = e.what();
  }
  EXPECT_EQ(status, 400);
  EXPECT_NE(msg.find("more than " + std::to_string(kMaxJsonNesting) + " levels deep"), std::string::npos) << msg;
  // At the bound: parsed (the route then judges the fields).
  req.body = "{\"x\":" + std::string(kMaxJsonNesting - 1, '[') + std::string(kMaxJsonNesting - 1, ']') + "}";
  EXPECT_TRUE(parse_json_body(req).contains("x"));
}

}  // namespace
}  // namespace cypris::server
