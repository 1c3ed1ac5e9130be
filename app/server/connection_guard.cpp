#include "app/server/connection_guard.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "app/server/errors.h"

namespace cypris::server {

namespace {

using Clock = std::chrono::steady_clock;

thread_local CurrentConnection t_conn;

// Every wait is cut into slices this long, so stop() is noticed within one.
constexpr int kSliceMs = 100;
// After stop(), a response already being written gets this long to go out (a 503 for a request
// cut off by the shutdown, say); reads stop at once.
constexpr std::chrono::milliseconds kStopWriteGrace{1000};

void address_of(const sockaddr_storage& ss, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  ip.clear();
  port = -1;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf))) ip = buf;
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf))) ip = buf;
    port = ntohs(a->sin6_port);
  }
}

// Non-blocking reads and writes on the connection's socket (through TLS when ssl is set), each
// waiting at most until a deadline and polling in slices so a stop is noticed.
class Io {
 public:
  Io(int fd, SSL* ssl, const std::atomic<bool>& stop) : fd_(fd), ssl_(ssl), stop_(stop) {}

  // > 0: bytes read; 0: the peer closed; -1: error or stopping; -2: the deadline passed.
  ssize_t read_some(char* buf, size_t n, Clock::time_point deadline) {
    n = std::min<size_t>(n, INT_MAX);
    while (true) {
      if (stop_) return -1;
      short want = POLLIN;
      if (ssl_) {
        const int r = SSL_read(ssl_, buf, static_cast<int>(n));
        if (r > 0) return r;
        const int e = SSL_get_error(ssl_, r);
        if (e == SSL_ERROR_ZERO_RETURN) return 0;
        if (e == SSL_ERROR_WANT_WRITE) {
          want = POLLOUT;
        } else if (e != SSL_ERROR_WANT_READ) {
          return e == SSL_ERROR_SYSCALL && r == 0 ? 0 : -1;
        }
      } else {
        const ssize_t r = ::recv(fd_, buf, n, 0);
        if (r >= 0) return r;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      }
      const int w = wait(want, deadline, true);
      if (w <= 0) return w == 0 ? -2 : -1;
    }
  }

  // true when all n bytes went out before the deadline.
  bool write_all(const char* p, size_t n, Clock::time_point deadline) {
    while (n > 0) {
      short want = POLLOUT;
      const int chunk = static_cast<int>(std::min<size_t>(n, INT_MAX));
      if (ssl_) {
        const int r = SSL_write(ssl_, p, chunk);
        if (r > 0) {
          p += r;
          n -= static_cast<size_t>(r);
          continue;
        }
        const int e = SSL_get_error(ssl_, r);
        if (e == SSL_ERROR_WANT_READ) {
          want = POLLIN;
        } else if (e != SSL_ERROR_WANT_WRITE) {
          return false;
        }
      } else {
        const ssize_t r = ::send(fd_, p, static_cast<size_t>(chunk), MSG_NOSIGNAL);
        if (r > 0) {
          p += r;
          n -= static_cast<size_t>(r);
          continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
      }
      if (wait(want, deadline, false) <= 0) return false;
    }
    return true;
  }

  // Waits for events on the socket: 1 ready, 0 the deadline passed, -1 error (or, for reads, stop).
  int wait(short events, Clock::time_point deadline, bool is_read) {
    while (true) {
      if (stop_) {
        if (is_read) return -1;
        if (!stop_seen_) {
          stop_seen_ = true;
          stop_deadline_ = Clock::now() + kStopWriteGrace;
        }
        deadline = std::min(deadline, stop_deadline_);
      }
      const auto now = Clock::now();
      if (now >= deadline) return 0;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
      pollfd p{fd_, events, 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(kSliceMs, left)));
      if (r < 0 && errno != EINTR) return -1;
      if (r > 0) return 1;  // POLLHUP/POLLERR too: the read or write then says what happened
    }
  }

  bool pending() const { return ssl_ && SSL_pending(ssl_) > 0; }
  int fd() const { return fd_; }

 private:
  int fd_;
  SSL* ssl_;
  const std::atomic<bool>& stop_;
  bool stop_seen_ = false;
  Clock::time_point stop_deadline_{};
};

// What httplib reads a request from: first the bytes the guard already read (the head and maybe
// the start of the body), then the socket, each read waiting at most io_timeout.
class ReplayStream final : public httplib::Stream {
 public:
  ReplayStream(Io& io, std::string buffered, std::chrono::milliseconds io_timeout, const std::string& remote_ip,
               int remote_port, const std::string& local_ip, int local_port)
      : io_(io),
        buf_(std::move(buffered)),
        timeout_(io_timeout),
        remote_ip_(remote_ip),
        remote_port_(remote_port),
        local_ip_(local_ip),
        local_port_(local_port) {}

  bool is_readable() const override {
    if (pos_ < buf_.size() || io_.pending()) return true;
    return io_.wait(POLLIN, Clock::now() + timeout_, true) == 1;
  }
  bool is_writable() const override { return io_.wait(POLLOUT, Clock::now() + timeout_, false) == 1; }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ < buf_.size()) {
      const size_t n = std::min(size, buf_.size() - pos_);
      std::memcpy(ptr, buf_.data() + pos_, n);
      pos_ += n;
      return static_cast<ssize_t>(n);
    }
    const ssize_t r = io_.read_some(ptr, size, Clock::now() + timeout_);
    if (r == -2) t_conn.body_stalled = true;
    return r < 0 ? -1 : r;
  }
  ssize_t write(const char* ptr, size_t size) override {
    return io_.write_all(ptr, size, Clock::now() + timeout_) ? static_cast<ssize_t>(size) : -1;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = remote_ip_;
    port = remote_port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = local_ip_;
    port = local_port_;
  }
  socket_t socket() const override { return io_.fd(); }

  // Bytes read past this request (a pipelined next request).
  std::string leftover() { return buf_.substr(std::min(pos_, buf_.size())); }

 private:
  Io& io_;
  std::string buf_;
  size_t pos_ = 0;
  std::chrono::milliseconds timeout_;
  std::string remote_ip_;
  int remote_port_;
  std::string local_ip_;
  int local_port_;
};

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

std::string error_response(int status, const std::string& message) {
  const std::string body = error_body(status, message, std::nullopt);
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
                     "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\nConnection: close\r\n";
  if (status == 405) head += "Allow: GET, HEAD, POST, DELETE, OPTIONS\r\n";
  return head + "\r\n" + body;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

}  // namespace

const CurrentConnection& current_connection() { return t_conn; }

int screen_request_head(const std::string& head, size_t max_body_bytes, std::string& why) {
  const size_t eol = head.find("\r\n");
  const std::string line = head.substr(0, eol);
  const size_t sp = line.find(' ');
  const std::string method = line.substr(0, sp);
  if (sp == std::string::npos || method.empty()) {
    why = "malformed request line";
    return 400;
  }
  static const char* const kServed[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"};
  if (std::find(std::begin(kServed), std::end(kServed), method) == std::end(kServed)) {
    const bool word = method.size() <= 20 && std::all_of(method.begin(), method.end(), [](char c) {
                        return (c >= 'A' && c <= 'Z') || c == '-' || c == '_';
                      });
    if (!word) {
      why = "malformed request line";
      return 400;
    }
    why = "method " + method + " is not allowed";
    return 405;
  }
  std::optional<std::string> length;
  size_t start = eol == std::string::npos ? head.size() : eol + 2;
  while (start < head.size()) {
    size_t end = head.find("\r\n", start);
    if (end == std::string::npos) end = head.size();
    const std::string h = head.substr(start, end - start);
    start = end + 2;
    const size_t colon = h.find(':');
    if (colon == std::string::npos) continue;
    if (lower(trim(h.substr(0, colon))) != "content-length") continue;
    const std::string v = trim(h.substr(colon + 1));
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos) {
      why = "Content-Length must be a non-negative integer, got '" + v.substr(0, 32) + "'";
      return 400;
    }
    if (length && *length != v) {
      why = "the request has two different Content-Length headers";
      return 400;
    }
    length = v;
  }
  if (length) {
    const std::string digits = length->substr(std::min(length->find_first_not_of('0'), length->size()));
    // More digits than any limit has: too large (and no overflow parsing it).
    if (digits.size() > 15 || std::stoull("0" + digits) > max_body_bytes) {
      why = "request body of " + (digits.empty() ? std::string("0") : digits.substr(0, 32)) +
            " bytes is larger than the limit of " + std::to_string(max_body_bytes >> 20) +
            " MiB (--max-request-body-mb)";
      return 413;
    }
  }
  return 0;
}

bool head_frames_body(const std::string& head) {
  size_t start = head.find("\r\n");
  while (start != std::string::npos && start + 2 < head.size()) {
    start += 2;
    size_t end = head.find("\r\n", start);
    const std::string h = head.substr(start, (end == std::string::npos ? head.size() : end) - start);
    const size_t colon = h.find(':');
    if (colon != std::string::npos) {
      const std::string name = lower(trim(h.substr(0, colon)));
      if (name == "content-length" || name == "transfer-encoding") return true;
    }
    start = end;
  }
  return false;
}

bool ConnectionGuard::admit(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t& mine = per_client_[client];
  if (open_ >= limits_.max_connections || mine >= limits_.max_per_client) {
    if (mine == 0) per_client_.erase(client);
    return false;
  }
  ++open_;
  ++mine;
  return true;
}

void ConnectionGuard::release(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  --open_;
  auto it = per_client_.find(client);
  if (it != per_client_.end() && --it->second == 0) per_client_.erase(it);
}

size_t ConnectionGuard::open_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

bool ConnectionGuard::serve(int fd, SSL_CTX* tls, const ProcessRequest& process) {
  sockaddr_storage peer{}, local{};
  socklen_t pl = sizeof(peer), ll = sizeof(local);
  std::string remote_ip, local_ip;
  int remote_port = -1, local_port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) == 0) address_of(peer, remote_ip, remote_port);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) == 0) address_of(local, local_ip, local_port);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK);

  auto close_fd = [fd] {
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
  };
  if (stopping_ || !admit(remote_ip)) {
    // Over a cap: say so at once (best effort, plain HTTP only) and free the worker thread.
    if (!tls && !stopping_) {
      const std::string r = error_response(
          503, "too many connections (--max-connections " + std::to_string(limits_.max_connections) +
                   ", --max-connections-per-client " + std::to_string(limits_.max_per_client) + "); try again later");
      (void)::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    close_fd();
    return false;
  }

  SSL* ssl = nullptr;
  const auto first_deadline = Clock::now() + limits_.head_timeout;
  bool ok = true;
  if (tls) {
    ssl = SSL_new(tls);
    ok = ssl && SSL_set_fd(ssl, fd) == 1;
    Io hs(fd, nullptr, stopping_);
    while (ok) {  // the handshake is part of the head: same deadline
      const int r = SSL_accept(ssl);
      if (r == 1) break;
      const int e = SSL_get_error(ssl, r);
      if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) ok = false;
      if (ok && hs.wait(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, first_deadline, true) != 1) ok = false;
    }
  }

  bool ret = false;
  if (ok) {
    Io io(fd, ssl, stopping_);
    bool answered = false;
    auto answer = [&](int status, const std::string& message) {
      const std::string r = error_response(status, message);
      io.write_all(r.data(), r.size(), Clock::now() + std::min(limits_.io_timeout, std::chrono::milliseconds(2000)));
      answered = true;
    };
    std::string buf;
    char tmp[8192];
    bool first = true;
    for (size_t left = limits_.max_requests_per_connection; left > 0 && !stopping_; --left) {
      if (buf.empty()) {  // wait for the next request to begin
        const ssize_t n = io.read_some(tmp, sizeof(tmp), first ? first_deadline : Clock::now() + limits_.keep_alive);
        if (n <= 0) break;
        buf.append(tmp, static_cast<size_t>(n));
      }
      first = false;
      const auto arrival = Clock::now();
      const auto head_deadline = arrival + limits_.head_timeout;
      size_t head_end = std::string::npos, searched = 0;
      bool head_ok = true;
      while ((head_end = buf.find("\r\n\r\n", searched)) == std::string::npos) {
        if (buf.size() > limits_.max_head_bytes) {
          answer(431, "the request head is larger than " + std::to_string(limits_.max_head_bytes) + " bytes");
          head_ok = false;
          break;
        }
        searched = buf.size() >= 3 ? buf.size() - 3 : 0;
        const ssize_t n = io.read_some(tmp, sizeof(tmp), head_deadline);
        if (n == -2) {
          answer(408, fmt::format("the request head did not arrive within {:g} s (--request-head-timeout)",
                                  limits_.head_timeout.count() / 1000.0));
        }
        if (n <= 0) {
          head_ok = false;
          break;
        }
        buf.append(tmp, static_cast<size_t>(n));
      }
      if (!head_ok) break;
      if (head_end > limits_.max_head_bytes) {
        answer(431, "the request head is larger than " + std::to_string(limits_.max_head_bytes) + " bytes");
        break;
      }
      std::string why;
      if (const int status = screen_request_head(buf.substr(0, head_end), limits_.max_body_bytes, why)) {
        answer(status, why);
        break;
      }
      if (!head_frames_body(buf.substr(0, head_end))) buf.insert(head_end + 2, "Content-Length: 0\r\n");
      ReplayStream strm(io, std::move(buf), limits_.io_timeout, remote_ip, remote_port, local_ip, local_port);
      t_conn = CurrentConnection{fd, ssl, arrival, false};
      bool closed = false;
      ret = process(strm, left == 1, closed, ssl);
      t_conn = CurrentConnection{};
      buf = strm.leftover();
      if (!ret || closed) break;
    }
    if (answered && !ssl) {
      // Closing with unread bytes from the client would reset the connection, and a reset can
      // destroy the answer before the client reads it: say we are done, and read what is still
      // coming for a moment.
      ::shutdown(fd, SHUT_WR);
      const auto until = Clock::now() + std::chrono::milliseconds(1000);
      while (io.read_some(tmp, sizeof(tmp), until) > 0) {
      }
    }
  }
  if (ssl) {
    SSL_shutdown(ssl);  // non-blocking: one attempt at close_notify
    SSL_free(ssl);
  }
  close_fd();
  release(remote_ip);
  return ret;
}

}  // namespace cypris::server
