// Internal HTTP layer of the hub client over libcurl (the curl headers stay in http.cpp).
// One HttpSession per thread; it reuses its connection between requests. Redirects are never
// followed here: the hub client follows relative ones itself and GETs absolute ones without auth.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cypris::hub::detail {

using HttpHeaders = std::map<std::string, std::string>;  // lower-case names; repeats joined with ", "

struct HttpResult {
  long status = 0;  // 0 when no response arrived
  HttpHeaders headers;
  std::string body;            // whole body for request(); error bodies only for stream()
  bool network_error = false;  // connection failed or dropped (retryable)
  bool cancelled = false;      // cancel flag set, or a callback asked to stop
  std::string error;           // curl's message

  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class HttpSession {
 public:
  explicit HttpSession(std::string user_agent);
  ~HttpSession();
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  // GET or HEAD; the body (capped at 64 MiB) is collected into the result.
  HttpResult request(const std::string& method, const std::string& url, const std::vector<std::string>& headers,
                     const std::atomic<bool>* cancel);

  // Streaming GET. For a 2xx answer, on_head(status, headers) is called before the first body
  // byte (or at the end for an empty body) and on_data receives the body; either may return false
  // to stop (the result is then `cancelled`). Non-2xx bodies are collected into result.body.
  // `stop` is a second flag that aborts the transfer like `cancel` (used to stop sibling chunks).
  HttpResult stream(const std::string& url, const std::vector<std::string>& headers,
                    const std::function<bool(long, const HttpHeaders&)>& on_head,
                    const std::function<bool(const char*, size_t)>& on_data, const std::atomic<bool>* cancel,
                    const std::atomic<bool>* stop = nullptr);

  struct Impl;  // public only so http.cpp's helpers can see it

 private:
  std::unique_ptr<Impl> impl_;
};

// Percent-encodes like Python's urllib.parse.quote (safe = "" or "/").
std::string url_quote(const std::string& s, bool keep_slash);
// "scheme://host:port" of a URL (lower-cased scheme and host), "" if it has none.
std::string url_origin(const std::string& url);

}  // namespace cypris::hub::detail
