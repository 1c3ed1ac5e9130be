#include "app/server/server.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "app/server/auth.h"
#include "app/server/connection_guard.h"
#include "app/server/errors.h"
#include "app/server/openai/chat_prompt.h"
#include "app/server/router.h"
#include "engine/common/error.h"
#include "engine/common/heap.h"
#include "engine/common/json_depth.h"
#include "engine/common/log.h"

namespace cypris {

using namespace server;

// ---------------------------------------------------------------------------------------------
// Router and helpers (declared in router.h)
namespace server {

Router::Router(httplib::Server& srv, ServerContext& c, std::string root_path)
    : ctx(c), srv_(srv), root_(std::move(root_path)) {
  while (!root_.empty() && root_.back() == '/') root_.pop_back();
  if (!root_.empty() && root_.front() != '/') root_ = "/" + root_;
}

std::string Router::strip_root(const std::string& path) const {
  if (!root_.empty() && path.compare(0, root_.size(), root_) == 0 &&
      (path.size() == root_.size() || path[root_.size()] == '/')) {
    std::string rest = path.substr(root_.size());
    return rest.empty() ? "/" : rest;
  }
  return path;
}

bool Router::known_path(const std::string& path) const {
  return paths_.count(strip_root(path)) > 0;
}

static std::string regex_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos) o += '\\';
    o += c;
  }
  return o;
}

namespace {

// A request whose body was at least this large leaves its parsed copies (JSON, prompts, token
// ids) in the heap when it ends: the heap is trimmed after it, by one thread at a time.
constexpr size_t kTrimAfterBodyBytes = size_t{1} << 20;
std::atomic<bool> g_trimming{false};

void trim_after_large_request(const httplib::Request& req) {
  if (req.body.size() < kTrimAfterBodyBytes || g_trimming.exchange(true)) return;
  release_free_heap();
  g_trimming = false;
}

}  // namespace

Handler Router::wrap(Handler h) {
  return [h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
    struct TrimAtEnd {
      const httplib::Request& req;
      ~TrimAtEnd() { trim_after_large_request(req); }
    } trim{req};
    try {
      h(req, res);
    } catch (const HttpError& e) {
      send_error(res, e.status(), e.what(), e.param());
    } catch (const cypris::Error& e) {
      send_error(res, 400, e.what());
    } catch (const nlohmann::json::exception& e) {
      send_error(res, 400, std::string("invalid request: ") + e.what());
    } catch (const std::exception& e) {
      LOG_ERROR("request {} {} failed: {}", req.method, req.path, e.what());
      send_error(res, 500, std::string("internal error: ") + e.what());
    } catch (...) {
      send_error(res, 500, "internal error");
    }
  };
}

#define CYPRIS_ROUTE_METHOD(NAME, HTTPLIB)                           \
  void Router::NAME(const std::string& path, Handler h) {            \
    paths_.insert(path);                                             \
    Handler w = wrap(std::move(h));                                  \
    srv_.HTTPLIB(regex_escape(path), w);                             \
    if (!root_.empty()) srv_.HTTPLIB(regex_escape(root_ + path), w); \
  }
CYPRIS_ROUTE_METHOD(get, Get)
CYPRIS_ROUTE_METHOD(post, Post)
CYPRIS_ROUTE_METHOD(del, Delete)
#undef CYPRIS_ROUTE_METHOD

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void send_json(httplib::Response& res, int status, const nlohmann::json& j) {
  res.status = status;
  res.set_content(dump_json(j), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message,
                const std::optional<std::string>& param) {
  res.status = status;
  res.set_content(error_body(status, message, param), "application/json");
}

nlohmann::json parse_json_body(const httplib::Request& req, bool allow_empty) {
  bool blank = std::all_of(req.body.begin(), req.body.end(), [](char c) { return std::isspace((unsigned char)c); });
  if (blank) {
    if (allow_empty) return nlohmann::json::object();
    throw HttpError(400, "request body is empty; expected a JSON object");
  }
  // Parsing is iterative, but copying, comparing and printing the value recurse once per level.
  if (json_nesting(req.body) > kMaxJsonNesting) {
    throw HttpError(400, fmt::format("request body nests arrays and objects more than {} levels deep (the limit)",
                                     kMaxJsonNesting));
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(req.body);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for numbers past a double (1e400), found by the fuzz test.
    throw HttpError(400, std::string("request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw HttpError(400, "request body must be a JSON object");
  return j;
}

void start_event_stream(const httplib::Request& req, httplib::Response& res,
                        std::function<void(const SseWrite&)> produce, std::function<void()> on_end) {
  auto alive = connection_probe(req);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // nginx: do not buffer the stream
  auto ran = std::make_shared<bool>(false);
  res.set_chunked_content_provider(
      "text/event-stream",
      [produce = std::move(produce), ran, alive](size_t, httplib::DataSink& sink) -> bool {
        if (*ran) return false;
        *ran = true;
        SseWrite write = [&sink, &alive](const std::string& s) -> bool {
          if (!sink.is_writable()) return false;
          // An empty chunk would end the chunked body: only probe the connection then.
          if (s.empty()) return alive();
          return sink.write(s.data(), s.size());
        };
        try {
          produce(write);
        } catch (const std::exception& e) {
          LOG_ERROR("event stream failed: {}", e.what());
        }
        sink.done();
        return true;
      },
      [on_end = std::move(on_end)](bool) {
        if (on_end) on_end();
      });
}

}  // namespace server

// ---------------------------------------------------------------------------------------------

namespace {

// httplib servers whose accepted sockets are served by the ConnectionGuard (admission caps, the
// request-head deadline, stop within a poll slice) instead of httplib's own connection loop.
class GuardedServer final : public httplib::Server {
 public:
  explicit GuardedServer(ConnectionGuard& g) : guard_(g) {}

 private:
  bool process_and_close_socket(socket_t sock) override {
    return guard_.serve(sock, nullptr, [this](httplib::Stream& s, bool close, bool& closed, SSL*) {
      return process_request(s, close, closed, nullptr);
    });
  }
  ConnectionGuard& guard_;
};

class GuardedSslServer final : public httplib::SSLServer {
 public:
  GuardedSslServer(ConnectionGuard& g, const char* cert, const char* key) : httplib::SSLServer(cert, key), guard_(g) {}

 private:
  bool process_and_close_socket(socket_t sock) override {
    return guard_.serve(sock, ssl_context(), [this](httplib::Stream& s, bool close, bool& closed, SSL* ssl) {
      return process_request(s, close, closed, [ssl](httplib::Request& r) { r.ssl = ssl; });
    });
  }
  ConnectionGuard& guard_;
};

ConnectionLimits limits_from(const EngineConfig& cfg) {
  const ServerOptions& o = cfg.server;
  ConnectionLimits l;
  // Each streaming request holds a connection for its whole life: room for a full batch.
  l.max_connections = static_cast<size_t>(
      o.max_connections > 0 ? o.max_connections : std::max<int64_t>(64, cfg.scheduler.max_num_seqs + 32));
  l.max_per_client = o.max_connections_per_client > 0 ? static_cast<size_t>(o.max_connections_per_client)
                                                      : std::max<size_t>(1, l.max_connections * 3 / 4);
  l.head_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.request_head_timeout * 1000.0));
  l.max_body_bytes = static_cast<size_t>(std::max<int64_t>(1, o.max_request_body_mb)) << 20;
  return l;
}

}  // namespace

struct Server::Impl {
  Impl(EngineConfig cfg, EngineFactory factory, std::shared_ptr<EngineClient> engine)
      : ctx(std::move(cfg), std::move(factory), std::move(engine)) {}
  ServerContext ctx;
  std::unique_ptr<ConnectionGuard> guard;
  std::unique_ptr<httplib::Server> http;
  std::unique_ptr<Router> router;
  std::thread thread;
  bool started = false;
  AuthConfig auth;
  int listen_fd = -1;
  std::function<void(const std::string&)> access_log;

  void configure();
  void apply_cors(const httplib::Request& req, httplib::Response& res) const;
};

static std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string o;
  for (size_t i = 0; i < v.size(); ++i) o += (i ? sep : "") + v[i];
  return o;
}

static bool has_star(const std::vector<std::string>& v) {
  return std::find(v.begin(), v.end(), "*") != v.end();
}

void Server::Impl::apply_cors(const httplib::Request& req, httplib::Response& res) const {
  const ServerOptions& o = ctx.cfg().server;
  if (!req.has_header("Origin")) return;
  const std::string origin = req.get_header_value("Origin");
  const bool any = has_star(o.allowed_origins);
  const bool listed = std::find(o.allowed_origins.begin(), o.allowed_origins.end(), origin) != o.allowed_origins.end();
  if (!any && !listed) return;
  // "*" cannot be combined with credentials: echo the origin instead.
  if (any && !o.allow_credentials) {
    res.set_header("Access-Control-Allow-Origin", "*");
  } else {
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
  }
  if (o.allow_credentials) res.set_header("Access-Control-Allow-Credentials", "true");
  if (req.method == "OPTIONS") {
    if (has_star(o.allowed_methods)) {
      res.set_header("Access-Control-Allow-Methods", "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
    } else {
      res.set_header("Access-Control-Allow-Methods", join(o.allowed_methods, ", "));
    }
    if (has_star(o.allowed_headers)) {
      std::string asked = req.get_header_value("Access-Control-Request-Headers");
      res.set_header("Access-Control-Allow-Headers", asked.empty() ? "*" : asked);
    } else {
      res.set_header("Access-Control-Allow-Headers", join(o.allowed_headers, ", "));
    }
    res.set_header("Access-Control-Max-Age", "600");
  }
}

void Server::Impl::configure() {
  const ServerOptions& o = ctx.cfg().server;
  auth.api_keys = o.api_keys;
  auth.admin_key = o.admin_key;
  auth.kobold_no_auth = o.kobold_no_auth;
  guard = std::make_unique<ConnectionGuard>(limits_from(ctx.cfg()));
  if (o.ssl_certfile || o.ssl_keyfile) {
    CYPRIS_CHECK(o.ssl_certfile && o.ssl_keyfile, "--ssl-certfile and --ssl-keyfile must be given together");
    auto s = std::make_unique<GuardedSslServer>(*guard, o.ssl_certfile->c_str(), o.ssl_keyfile->c_str());
    CYPRIS_CHECK(s->is_valid(),
                 "cannot use --ssl-certfile '{}' with --ssl-keyfile '{}': not a readable PEM "
                 "certificate and matching private key",
                 *o.ssl_certfile, *o.ssl_keyfile);
    http = std::move(s);
  } else {
    http = std::make_unique<GuardedServer>(*guard);
  }
  // Connections over a cap are turned away by the guard on a worker thread; the spare threads
  // make sure that happens at once even while every admitted connection is busy.
  const size_t threads = guard->limits().max_connections + 16;
  http->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http->set_payload_max_length(guard->limits().max_body_bytes);
  // httplib's default options add SO_REUSEPORT, which lets a second server bind the same port
  // and silently share its traffic: set SO_REUSEADDR only, so "address in use" is an error.
  // httplib also listens with a backlog of 5; remember the socket to raise it after binding, or a
  // burst of clients (SillyTavern swipes, benchmarks) gets connections reset.
  http->set_socket_options([this](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd = static_cast<int>(sock);
  });

  router = std::make_unique<Router>(*http, ctx, o.root_path.value_or(""));

  http->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    apply_cors(req, res);
    if (req.method == "OPTIONS") {  // preflights never need a key (Aphrodite #434)
      res.status = 200;
      return httplib::Server::HandlerResponse::Handled;
    }
    const std::string path = router->strip_root(req.path);
    AuthLevel level = required_auth_level(path, auth);
    if (level == AuthLevel::User && path.rfind("/api", 0) == 0 && !ctx.cfg().server.launch_kobold_api) {
      level = AuthLevel::Open;  // not served anyway: let it 404 rather than 401
    }
    auto key = presented_key(req.get_header_value("Authorization"), req.get_header_value("x-api-key"));
    switch (check_auth(level, key, auth)) {
      case AuthResult::Ok:
        return httplib::Server::HandlerResponse::Unhandled;
      case AuthResult::Unauthorized:
        send_error(res, 401,
                   key ? "Unauthorized: invalid API key"
                       : "Unauthorized: an API key is required "
                         "(Authorization: Bearer <key> or x-api-key: <key>)");
        return httplib::Server::HandlerResponse::Handled;
      case AuthResult::Forbidden:
        send_error(res, 403,
                   auth.admin_key ? "Forbidden: this route needs the admin key"
                                  : "Forbidden: this route needs --admin-key to be set on the server");
        return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  httplib::Server::HandlerWithResponse on_error = [this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (current_connection().body_stalled) {
      send_error(res, 408, "the request body stopped arriving before Content-Length bytes came");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (res.status == 404 && router->known_path(req.path)) {
      send_error(res, 405, "method " + req.method + " is not allowed on " + req.path);
    } else if (res.status == 404) {
      send_error(res, 404, "no route " + req.method + " " + req.path);
    } else if (res.status == 413) {
      send_error(res, 413,
                 "request body is larger than the limit of " + std::to_string(ctx.cfg().server.max_request_body_mb) +
                     " MiB (--max-request-body-mb)");
    } else {
      send_error(res, res.status, "HTTP " + std::to_string(res.status));
    }
    return httplib::Server::HandlerResponse::Handled;
  };
  http->set_error_handler(std::move(on_error));
  http->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg += std::string(": ") + e.what();
    } catch (...) {
    }
    send_error(res, 500, msg);
  });

  register_openai_routes(*router);
  if (o.launch_kobold_api) register_kobold_routes(*router);
}

Server::Server(EngineConfig cfg, EngineFactory factory, std::shared_ptr<EngineClient> engine)
    : impl_(std::make_unique<Impl>(std::move(cfg), std::move(factory), std::move(engine))) {}

Server::~Server() {
  stop();
}

std::shared_ptr<EngineClient> Server::engine() const {
  return impl_->ctx.engine();
}

void Server::set_access_log(std::function<void(const std::string&)> log) { impl_->access_log = std::move(log); }

int Server::start() {
  CYPRIS_CHECK(!impl_->started, "the server is already started");
  // Hundreds of HTTP threads must not each get a malloc arena that keeps its freed memory.
  limit_malloc_arenas(kServerMallocArenas);
  impl_->configure();
  if (impl_->access_log) {
    impl_->http->set_logger([log = impl_->access_log](const httplib::Request& req, const httplib::Response& res) {
      log(req.method + " " + req.path + " " + std::to_string(res.status));
    });
  }
  const ServerOptions& o = impl_->ctx.cfg().server;
  CYPRIS_CHECK(o.port >= 0 && o.port <= 65535, "--port must be in 0..65535, got {}", o.port);
  int port = 0;
  if (o.port == 0) {
    port = impl_->http->bind_to_any_port(o.host);
    CYPRIS_CHECK(port > 0, "cannot listen on {} (--host): no free port", o.host);
  } else {
    CYPRIS_CHECK(impl_->http->bind_to_port(o.host, static_cast<int>(o.port)),
                 "cannot listen on {}:{} (--host/--port): the address is in use or not local", o.host, o.port);
    port = static_cast<int>(o.port);
  }
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, SOMAXCONN);
  // A model whose own chat template is broken loads, but say so now rather than per request.
  if (auto e = impl_->ctx.engine()) warn_about_broken_chat_templates(e->tokenizer(), o.chat_template.value_or(""));
  impl_->started = true;
  impl_->thread = std::thread([this] { impl_->http->listen_after_bind(); });
  const bool tls = o.ssl_certfile.has_value();
  LOG_INFO("Serving the OpenAI API{} on {}://{}:{}{}", o.launch_kobold_api ? " and the KoboldAI API" : "",
           tls ? "https" : "http", o.host, port, o.root_path.value_or(""));
  if (o.launch_kobold_api && o.kobold_no_auth && !o.api_keys.empty()) {
    LOG_INFO("--kobold-no-auth: the KoboldAI routes (/api/...) need no API key");
  }
  return port;
}

void Server::stop() {
  if (!impl_->started) return;
  impl_->started = false;
  impl_->ctx.set_stopping();
  impl_->ctx.cancel_all();
  impl_->guard->stop();  // every connection ends within a poll slice, whatever its client does
  impl_->http->stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace cypris
