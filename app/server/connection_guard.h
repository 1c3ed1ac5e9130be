// How the server holds up against slow and hostile clients: every accepted connection is admitted
// against a cap (in all, and per client address), its request head must arrive whole within a
// deadline, obviously bad heads (a Content-Length that is negative, unparsable or over the body
// limit, methods the server has no route for) are answered at once without reading a body, and
// every wait polls in short slices so stop() ends all connections within a fraction of a second.
// httplib 0.11 has none of this (one 30 s timeout per recv, no deadline, no cap), so the server's
// httplib::Server subclasses hand each accepted socket to ConnectionGuard::serve(), which reads
// the head itself and then lets httplib's process_request() parse and route it from a Stream that
// replays those bytes. Internal to app/server/; Linux.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <mutex>
#include <string>

namespace cypris::server {

struct ConnectionLimits {
  size_t max_connections = 64;             // connections served at once
  size_t max_per_client = 48;              // of those, from one client address
  std::chrono::milliseconds head_timeout{10000};  // the whole request head (request line + headers)
  std::chrono::milliseconds io_timeout{30000};    // one read or write once the head is in
  std::chrono::milliseconds keep_alive{5000};     // waiting for the next request on a kept connection
  size_t max_head_bytes = 64 * 1024;
  size_t max_body_bytes = 32u << 20;
  size_t max_requests_per_connection = 100;
  std::string body_limit_flag = "--max-request-body-mb";  // named in the 413 answer
};

// httplib's request handling for one request read from strm (Server::process_request).
using ProcessRequest = std::function<bool(httplib::Stream& strm, bool close_connection, bool& connection_closed,
                                          SSL* ssl)>;

class ConnectionGuard {
 public:
  explicit ConnectionGuard(ConnectionLimits limits) : limits_(std::move(limits)) {}

  // Serves one accepted socket until the client is done, a limit is hit or stop() is called;
  // closes it. tls: the server's TLS context (the handshake gets the head deadline), or nullptr.
  bool serve(int fd, SSL_CTX* tls, const ProcessRequest& process);
  // Every connection ends within about one poll slice (100 ms), whatever its client does.
  void stop() { stopping_ = true; }
  bool stopping() const { return stopping_.load(); }

  size_t open_connections() const;
  const ConnectionLimits& limits() const { return limits_; }

 private:
  // Admission: false when the connection would pass a cap (then nothing was counted).
  bool admit(const std::string& client);
  void release(const std::string& client);

  ConnectionLimits limits_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  size_t open_ = 0;
  std::map<std::string, size_t> per_client_;
};

// About the request being served on this thread (handlers run on their connection's thread):
// its socket, TLS session and when its head began to arrive. fd is -1 outside a guarded connection.
struct CurrentConnection {
  int fd = -1;
  SSL* ssl = nullptr;
  std::chrono::steady_clock::time_point arrival{};
  bool body_stalled = false;  // the body stopped arriving (a read timed out): answer 408
};
const CurrentConnection& current_connection();

// What the server answers, without reading further, to a request head (request line and headers,
// "\r\n"-separated, the blank line excluded): 0 when it may go on to httplib, else the status
// (405 for methods without routes, 400 for a malformed Content-Length, 413 for one over the limit)
// with the message in `why`. Pure, so the fuzz test can drive it.
int screen_request_head(const std::string& head, size_t max_body_bytes, std::string& why);

// True when the head says how its body is framed (Content-Length or Transfer-Encoding). A request
// without either has no body (RFC 9112 6.3); httplib 0.11 would read one until the connection
// closes, so the guard adds "Content-Length: 0" (POST /v1/model/unload with no body, say).
bool head_frames_body(const std::string& head);

}  // namespace cypris::server
