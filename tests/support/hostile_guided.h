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

// What every refusal says: "... levels deep (the limit)".
inline constexpr const char* kNestingLimitPhrase = "levels deep (the limit";

}  // namespace cypris::testing_support
