// Route registration and response helpers shared by server.cpp, openai/ and kobold/. Internal to
// app/server/: this is the one header that includes httplib.h, and only server .cpp files include it.
#pragma once

#include <httplib.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "app/server/connection.h"
#include "app/server/context.h"

namespace cypris::server {

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

// Registers handlers at their path and under --root-path, each wrapped so no exception escapes:
// HttpError -> its status, cypris::Error and JSON type errors -> 400, anything else -> 500.
class Router {
 public:
  Router(httplib::Server& srv, ServerContext& ctx, std::string root_path);
  void get(const std::string& path, Handler h);
  void post(const std::string& path, Handler h);
  void del(const std::string& path, Handler h);
  // Path (without root prefix) registered for some method: a 404 on it becomes 405.
  bool known_path(const std::string& path) const;
  std::string strip_root(const std::string& path) const;

  ServerContext& ctx;

 private:
  Handler wrap(Handler h);
  httplib::Server& srv_;
  std::string root_;
  std::set<std::string> paths_;
};

void send_json(httplib::Response& res, int status, const nlohmann::json& j);
void send_error(httplib::Response& res, int status, const std::string& message,
                const std::optional<std::string>& param = std::nullopt);

// The body as a JSON object; HttpError 400 when it is not valid JSON or not an object. An empty
// body is {} when allow_empty.
nlohmann::json parse_json_body(const httplib::Request& req, bool allow_empty = false);

// JSON text that never throws on invalid UTF-8 (replaced with U+FFFD).
std::string dump_json(const nlohmann::json& j);

// Runs `produce` on the connection's thread as the body of a text/event-stream response. The
// write function returns false once the client is gone; `on_end` runs when the response is over
// however it ended (cancel whatever is still running there).
using SseWrite = std::function<bool(const std::string&)>;
// write("") writes nothing and reports whether the client is still connected.
void start_event_stream(const httplib::Request& req, httplib::Response& res,
                        std::function<void(const SseWrite&)> produce, std::function<void()> on_end);

void register_openai_routes(Router& r);
void register_kobold_routes(Router& r);

}  // namespace cypris::server
