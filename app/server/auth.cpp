#include "app/server/auth.h"

#include <cctype>

namespace cypris::server {

bool constant_time_equals(std::string_view a, std::string_view b) {
  // Length differences still leak, which is fine: keys are not secret in length.
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | (x ^ y);
  }
  return diff == 0;
}

static bool starts_with_segment(std::string_view path, std::string_view prefix) {
  if (path.substr(0, prefix.size()) != prefix) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '/';
}

AuthLevel required_auth_level(std::string_view path, const AuthConfig& cfg) {
  if (starts_with_segment(path, "/v1/model") || starts_with_segment(path, "/v1/lora") ||
      path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter" ||
      starts_with_segment(path, "/v1/soft_prompt")) {
    return AuthLevel::Admin;
  }
  if (starts_with_segment(path, "/v1")) return AuthLevel::User;
  if (starts_with_segment(path, "/api")) return cfg.kobold_no_auth ? AuthLevel::Open : AuthLevel::User;
  return AuthLevel::Open;
}

std::optional<std::string> presented_key(std::string_view authorization, std::string_view x_api_key) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
  };
  authorization = trim(authorization);
  if (authorization.size() > 7) {
    std::string scheme(authorization.substr(0, 7));
    for (auto& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (scheme == "bearer ") return std::string(trim(authorization.substr(7)));
  }
  x_api_key = trim(x_api_key);
  if (!x_api_key.empty()) return std::string(x_api_key);
  return std::nullopt;
}

AuthResult check_auth(AuthLevel level, const std::optional<std::string>& key, const AuthConfig& cfg) {
  // Admin routes load models from paths given in the request: never open, even on a server
  // without keys.
  if (level == AuthLevel::Admin && !cfg.admin_key) return AuthResult::Forbidden;
  const bool any_key = !cfg.api_keys.empty() || cfg.admin_key.has_value();
  if (level == AuthLevel::Open || !any_key) return AuthResult::Ok;
  bool is_admin = false, is_user = false;
  if (key) {
    if (cfg.admin_key && constant_time_equals(*key, *cfg.admin_key)) is_admin = true;
    for (const auto& k : cfg.api_keys) {
      if (constant_time_equals(*key, k)) is_user = true;  // no early exit: check every key
    }
  }
  if (level == AuthLevel::Admin) {
    if (is_admin) return AuthResult::Ok;
    return is_user ? AuthResult::Forbidden : AuthResult::Unauthorized;
  }
  // User level: with only an admin key configured, user routes stay open (nothing to check).
  if (cfg.api_keys.empty()) return AuthResult::Ok;
  return (is_user || is_admin) ? AuthResult::Ok : AuthResult::Unauthorized;
}

}  // namespace cypris::server
