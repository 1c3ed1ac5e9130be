// libcurl implementation of the hub's HTTP layer (see http.h).
#include "engine/hub/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <mutex>

namespace cypris::hub::detail {
namespace {

constexpr size_t kMaxBody = 64u << 20;

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

struct Transfer {
  CURL* curl = nullptr;
  HttpResult result;
  bool streaming = false;
  bool head_delivered = false;
  bool stopped_by_callback = false;
  const std::function<bool(long, const HttpHeaders&)>* on_head = nullptr;
  const std::function<bool(const char*, size_t)>* on_data = nullptr;
  const std::atomic<bool>* cancel = nullptr;
  const std::atomic<bool>* stop = nullptr;

  long status() {
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    return code;
  }
  bool deliver_head() {
    head_delivered = true;
    result.status = status();
    if (streaming && result.status >= 200 && result.status < 300 && on_head && *on_head) {
      if (!(*on_head)(result.status, result.headers)) {
        stopped_by_callback = true;
        return false;
      }
    }
    return true;
  }
};

size_t on_header_line(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    t->result.headers.clear();  // a new response (e.g. after 100 Continue)
    return size * n;
  }
  auto colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = lower(trim(line.substr(0, colon)));
  std::string value = trim(line.substr(colon + 1));
  auto& slot = t->result.headers[name];
  slot = slot.empty() ? value : slot + ", " + value;
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t len = size * n;
  if (!t->head_delivered && !t->deliver_head()) return 0;
  bool ok_status = t->result.status >= 200 && t->result.status < 300;
  if (t->streaming && ok_status) {
    if (t->on_data && *t->on_data && !(*t->on_data)(data, len)) {
      t->stopped_by_callback = true;
      return 0;
    }
    return len;
  }
  if (t->result.body.size() + len > kMaxBody) return 0;
  t->result.body.append(data, len);
  return len;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  return ((t->cancel && t->cancel->load()) || (t->stop && t->stop->load())) ? 1 : 0;
}

}  // namespace

struct HttpSession::Impl {
  CURL* curl = nullptr;
  std::string user_agent;
};

HttpSession::HttpSession(std::string user_agent) : impl_(std::make_unique<Impl>()) {
  global_init();
  impl_->curl = curl_easy_init();
  impl_->user_agent = std::move(user_agent);
}

HttpSession::~HttpSession() {
  if (impl_->curl) curl_easy_cleanup(impl_->curl);
}

static HttpResult perform(HttpSession::Impl& s, Transfer& t, const std::string& method, const std::string& url,
                          const std::vector<std::string>& headers) {
  CURL* c = s.curl;
  t.curl = c;
  if (!c) {
    t.result.network_error = true;
    t.result.error = "curl_easy_init failed";
    return t.result;
  }
  curl_easy_reset(c);
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, s.user_agent.c_str());
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 20L);
  // A stalled transfer (under 1 byte/s for 60 s) counts as a dropped connection and is retried.
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  if (method == "HEAD") curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  struct curl_slist* list = nullptr;
  for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
  // Never negotiate compression: sizes and ranges must refer to the stored bytes.
  list = curl_slist_append(list, "Accept-Encoding: identity");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header_line);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(list);
  if (rc == CURLE_OK && !t.head_delivered) t.deliver_head();
  if (rc == CURLE_OK) {
    t.result.status = t.status();
    return t.result;
  }
  t.result.status = t.status();
  t.result.error = curl_easy_strerror(rc);
  if (rc == CURLE_ABORTED_BY_CALLBACK || t.stopped_by_callback) {
    t.result.cancelled = true;
  } else if (rc == CURLE_WRITE_ERROR) {
    t.result.network_error = false;  // body too large
  } else {
    t.result.network_error = true;
  }
  return t.result;
}

HttpResult HttpSession::request(const std::string& method, const std::string& url,
                                const std::vector<std::string>& headers, const std::atomic<bool>* cancel) {
  Transfer t;
  t.cancel = cancel;
  return perform(*impl_, t, method, url, headers);
}

HttpResult HttpSession::stream(const std::string& url, const std::vector<std::string>& headers,
                               const std::function<bool(long, const HttpHeaders&)>& on_head,
                               const std::function<bool(const char*, size_t)>& on_data, const std::atomic<bool>* cancel,
                               const std::atomic<bool>* stop) {
  Transfer t;
  t.streaming = true;
  t.stop = stop;
  t.on_head = &on_head;
  t.on_data = &on_data;
  t.cancel = cancel;
  return perform(*impl_, t, "GET", url, headers);
}

std::string url_quote(const std::string& s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string url_origin(const std::string& url) {
  auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return "";
  auto host_end = url.find_first_of("/?#", scheme_end + 3);
  std::string scheme = lower(url.substr(0, scheme_end));
  std::string host =
      lower(url.substr(scheme_end + 3, host_end == std::string::npos ? std::string::npos : host_end - scheme_end - 3));
  if (host.find(':') == std::string::npos) host += scheme == "https" ? ":443" : ":80";
  return scheme + "://" + host;
}

}  // namespace cypris::hub::detail
