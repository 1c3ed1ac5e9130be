// API-key checks: which key a route needs and whether the request presents it. Pure logic (no
// HTTP types) so it is unit-tested on its own.
//
// Rules (Aphrodite's, minus its bugs):
// - no --api-keys and no --admin-key: nothing is checked;
// - /health, /version, /metrics, /.well-known/serviceinfo and / are never checked, OPTIONS
//   preflights never (server.cpp answers them before auth);
// - /v1/* and /api/* need one of --api-keys (or the admin key); /api/* stays open with
//   --kobold-no-auth because SillyTavern's KoboldAI Classic mode never sends a key;
// - /v1/model/{load,unload}, /v1/lora/*, /v1/{load,unload}_lora_adapter, /v1/soft_prompt/* need
//   --admin-key (matched exactly,
//   so /v1/models is not an admin route); without --admin-key they are refused (403), since
//   loading reads paths named by the request;
// - the key comes from `Authorization: Bearer <key>` or `x-api-key: <key>`.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cypris::server {

// Compares without an early exit, so the time taken does not reveal how much of a key matched.
bool constant_time_equals(std::string_view a, std::string_view b);

enum class AuthLevel { Open, User, Admin };
enum class AuthResult { Ok, Unauthorized, Forbidden };  // 200, 401, 403

struct AuthConfig {
  std::vector<std::string> api_keys;
  std::optional<std::string> admin_key;
  bool kobold_no_auth = false;
};

// path is without the --root-path prefix.
AuthLevel required_auth_level(std::string_view path, const AuthConfig& cfg);

// The key the client sent: Bearer token first, else x-api-key; nullopt when neither.
std::optional<std::string> presented_key(std::string_view authorization_header, std::string_view x_api_key_header);

AuthResult check_auth(AuthLevel level, const std::optional<std::string>& key, const AuthConfig& cfg);

}  // namespace cypris::server
