// The guided-decoding requests of issue #26 item 1 that crashed the server by nesting depth: each
// a route and a JSON body (at most a few hundred KB), for the route-level unit tests and the HTTP
// tests. Every one must be answered 400 with a message that states the nesting limit.
#pragma once

#include <string>
#include <vector>

namespace cypris::testing_support {

struct HostileGuidedCase {
  std::string name;
  std::string route;  // "/v1/completions", "/v1/chat/completions", "/api/v1/generate", "/api/extra/generate/stream"
  std::string body;   // JSON
};

// The 25 shapes (regex, GBNF, Lark, JSON Schema in every field that carries one, tools,
// Kobold grammar), at the sizes the issue reported.
std::vector<HostileGuidedCase> hostile_guided_cases();

// What every refusal says: "... levels deep (the limit)" from the grammar front ends and the body
// check, or the chat template's own bound on its input ("JSON nested more than 256 levels"), which
// the chat route meets first when the tools' parameters nest deeply.
inline bool states_nesting_limit(const std::string& message) {
  return message.find("levels deep (the limit") != std::string::npos ||
         message.find("nested more than 256 levels") != std::string::npos;
}

}  // namespace cypris::testing_support
