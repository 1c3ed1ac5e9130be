// Internal: HubClient's state and the request helpers shared by the API calls (hub_client.cpp)
// and the downloader (snapshot.cpp, blob_download.cpp). No curl or json headers here.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "engine/hub/http.h"
#include "engine/hub/hub.h"

namespace cypris::hub::detail {

// What a failed request was about, for error messages.
struct ErrorContext {
  std::string repo;
  std::string revision;
  std::string path;
  std::string what;  // "model info", "file list", ...
};

// Throws the HubError that matches a failed result (X-Error-Code first, then the status).
[[noreturn]] void raise_for_result(const HttpResult& r, const ErrorContext& ctx, const std::string& endpoint);

bool is_retryable(const HttpResult& r);
// Delay before retry number `attempt` (0-based): Retry-After / RateLimit for 429, else backoff.
int retry_delay_ms(const RetryPolicy& p, int attempt, const HttpResult& r);
// Sleeps in small steps; false when cancelled.
bool sleep_unless_cancelled(int ms, const std::atomic<bool>* cancel);
HttpResult with_retries(const RetryPolicy& p, const std::atomic<bool>* cancel,
                        const std::function<HttpResult()>& attempt);

// "https://host:port" part of a URL as written (for joining relative redirects).
std::string url_base(const std::string& url);
std::string normalize_etag(const std::string& etag);

struct FileMetadata {
  std::string commit;     // X-Repo-Commit
  std::string etag;       // normalised X-Linked-Etag or ETag
  uint64_t size = 0;      // X-Linked-Size, or Content-Length of a non-redirect
  std::string location;   // where to GET the bytes
  bool send_auth = true;  // false when location is on another origin (a CDN)
};

}  // namespace cypris::hub::detail

namespace cypris::hub {

struct HubClient::Impl {
  HubSettings settings;
  detail::HttpSession http;

  explicit Impl(HubSettings s) : settings(std::move(s)), http(settings.user_agent) {}

  std::vector<std::string> auth_headers() const;
  // GET with retries; throws on a failed result. next_link receives the Link rel="next" URL (or "").
  std::string get_api(const std::string& url, const detail::ErrorContext& ctx, std::string* next_link = nullptr);
  // HEAD of resolve/<revision>/<path>, following relative redirects only (no retries on 4xx).
  detail::FileMetadata head_file(detail::HttpSession& http, const std::string& repo, const std::string& revision,
                                 const std::string& path, const std::atomic<bool>* cancel);
  std::string repo_api_url(const std::string& repo) const { return settings.endpoint + "/api/models/" + repo; }
  void check_online(const detail::ErrorContext& ctx) const;
};

}  // namespace cypris::hub
