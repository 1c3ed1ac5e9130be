#include "app/server/errors.h"

#include <nlohmann/json.hpp>

namespace cypris::server {

std::string error_type_for_status(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 405:
      return "method_not_allowed_error";
    case 413:
      return "request_too_large_error";
    case 501:
      return "not_implemented_error";
    case 503:
      return "service_unavailable_error";
    default:
      return status >= 500 ? "internal_server_error" : "invalid_request_error";
  }
}

static nlohmann::json error_json(int status, const std::string& message, const std::optional<std::string>& param) {
  nlohmann::json e;
  e["message"] = message;
  e["type"] = error_type_for_status(status);
  e["param"] = param ? nlohmann::json(*param) : nlohmann::json(nullptr);
  e["code"] = status;
  return e;
}

std::string error_object(int status, const std::string& message, const std::optional<std::string>& param) {
  return error_json(status, message, param).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string error_body(int status, const std::string& message, const std::optional<std::string>& param) {
  nlohmann::json j;
  j["error"] = error_json(status, message, param);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace cypris::server
