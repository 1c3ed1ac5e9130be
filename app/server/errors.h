// OpenAI-shaped HTTP errors: {"error":{"message","type","param","code"}}. Handlers throw HttpError
// (or cypris::Error for bad input) and the route wrapper in server.cpp turns it into a response, so
// no exception ever leaves a handler.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

namespace cypris::server {

class HttpError : public std::runtime_error {
 public:
  HttpError(int status, const std::string& message, std::optional<std::string> param = std::nullopt)
      : std::runtime_error(message), status_(status), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::optional<std::string>& param() const { return param_; }

 private:
  int status_;
  std::optional<std::string> param_;
};

// "invalid_request_error" for 400, "authentication_error" for 401, ...
std::string error_type_for_status(int status);

// The JSON text of an error body (the "code" member is the HTTP status).
std::string error_body(int status, const std::string& message, const std::optional<std::string>& param = std::nullopt);

// Just the inner {"message",...} object as JSON text, for an error sent inside an SSE stream.
std::string error_object(int status, const std::string& message,
                         const std::optional<std::string>& param = std::nullopt);

}  // namespace cypris::server
