// HubClient: settings from the environment, error mapping, retries, and the JSON API calls
// (refs, model info, tree, search). Downloads live in snapshot.cpp and blob_download.cpp.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/common/log.h"
#include "engine/hub/cache.h"
#include "engine/hub/client_impl.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cypris::hub {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string expand_home(const std::string& p) {
  if (p.rfind("~", 0) == 0) return env("HOME") + p.substr(1);
  return p;
}

bool env_true(const char* name) {
  std::string v = env(name);
  for (auto& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

std::string clean_token(std::string t) {
  t.erase(std::remove_if(t.begin(), t.end(), [](char c) { return c == '\r' || c == '\n'; }), t.end());
  size_t a = t.find_first_not_of(" \t"), b = t.find_last_not_of(" \t");
  return a == std::string::npos ? std::string() : t.substr(a, b - a + 1);
}

std::string json_error_text(const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "";
  if (j.contains("error")) {
    const auto& e = j["error"];
    if (e.is_string()) return e.get<std::string>();
    if (e.is_array()) {
      std::string s;
      for (const auto& x : e) {
        if (x.is_string()) s += (s.empty() ? "" : "; ") + x.get<std::string>();
      }
      return s;
    }
  }
  if (j.contains("errors") && j["errors"].is_array()) {
    std::string s;
    for (const auto& x : j["errors"]) {
      if (x.is_object() && x.value("message", json()).is_string()) {
        s += (s.empty() ? "" : "; ") + x["message"].get<std::string>();
      }
    }
    return s;
  }
  return "";
}

// Parses `<url>; rel="next"` out of a Link header.
std::string next_link(const std::string& link) {
  size_t pos = 0;
  while ((pos = link.find('<', pos)) != std::string::npos) {
    size_t end = link.find('>', pos);
    if (end == std::string::npos) break;
    size_t next_entry = link.find('<', end);
    std::string params =
        link.substr(end + 1, next_entry == std::string::npos ? std::string::npos : next_entry - end - 1);
    if (params.find("rel=\"next\"") != std::string::npos || params.find("rel=next") != std::string::npos) {
      return link.substr(pos + 1, end - pos - 1);
    }
    pos = end;
  }
  return "";
}

GitRef parse_ref(const json& j) {
  GitRef r;
  r.name = j.value("name", "");
  r.ref = j.value("ref", "");
  r.target_commit = j.value("targetCommit", "");
  return r;
}

// The Hub's JSON is input like any other: a field of the wrong type becomes a HubError.
template <class Fn>
auto guard_json(const std::string& what, const std::string& repo, const std::string& endpoint, Fn&& fn) {
  try {
    return fn();
  } catch (const json::exception& e) {
    throw HubError(HubErrorKind::Http,
                   fmt::format("unexpected {} answer for '{}' from {}: {}", what, repo, endpoint, e.what()));
  }
}

}  // namespace

const char* hub_error_kind_name(HubErrorKind kind) {
  switch (kind) {
    case HubErrorKind::RepoNotFound:
      return "RepoNotFound";
    case HubErrorKind::RevisionNotFound:
      return "RevisionNotFound";
    case HubErrorKind::EntryNotFound:
      return "EntryNotFound";
    case HubErrorKind::GatedRepo:
      return "GatedRepo";
    case HubErrorKind::Unauthorized:
      return "Unauthorized";
    case HubErrorKind::NotCached:
      return "NotCached";
    case HubErrorKind::Network:
      return "Network";
    case HubErrorKind::Http:
      return "Http";
    case HubErrorKind::Cancelled:
      return "Cancelled";
    case HubErrorKind::Integrity:
      return "Integrity";
    case HubErrorKind::DiskFull:
      return "DiskFull";
    case HubErrorKind::BadInput:
      return "BadInput";
    case HubErrorKind::Io:
      return "Io";
  }
  return "?";
}

HubSettings settings_from_env(const std::string& token_override) {
  HubSettings s;
  std::string endpoint = env("HF_ENDPOINT");
  if (!endpoint.empty()) {
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    s.endpoint = endpoint;
  }
  std::string hf_home = env("HF_HOME");
  if (hf_home.empty()) {
    std::string xdg = env("XDG_CACHE_HOME");
    hf_home = xdg.empty() ? env("HOME") + "/.cache/huggingface" : xdg + "/huggingface";
  }
  hf_home = expand_home(hf_home);
  std::string cache = env("HF_HUB_CACHE");
  if (cache.empty()) cache = env("HUGGINGFACE_HUB_CACHE");
  s.cache_dir = cache.empty() ? hf_home + "/hub" : expand_home(cache);
  s.offline = env_true("HF_HUB_OFFLINE") || env_true("TRANSFORMERS_OFFLINE");

  if (!token_override.empty()) {
    s.token = clean_token(token_override);
  } else if (!env_true("HF_HUB_DISABLE_IMPLICIT_TOKEN")) {
    s.token = clean_token(env("HF_TOKEN"));
    if (s.token.empty()) s.token = clean_token(env("HUGGING_FACE_HUB_TOKEN"));
    if (s.token.empty()) {
      std::string path = env("HF_TOKEN_PATH");
      path = path.empty() ? hf_home + "/token" : expand_home(path);
      std::error_code ec;
      if (fs::is_regular_file(path, ec)) {
        try {
          s.token = clean_token(read_small_file(path));
        } catch (const HubError&) {
          LOG_WARN("cannot read the Hugging Face token file {}; continuing without a token", path);
        }
      }
    }
  }
  return s;
}

namespace detail {

std::string url_base(const std::string& url) {
  auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return "";
  auto host_end = url.find_first_of("/?#", scheme_end + 3);
  return host_end == std::string::npos ? url : url.substr(0, host_end);
}

std::string normalize_etag(const std::string& etag) {
  // Python: etag.lstrip("W/").strip('"') -- strips the characters 'W' and '/', not the prefix.
  size_t a = etag.find_first_not_of("W/");
  std::string s = a == std::string::npos ? std::string() : etag.substr(a);
  size_t b = s.find_first_not_of('"'), e = s.find_last_not_of('"');
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

[[noreturn]] void raise_for_result(const HttpResult& r, const ErrorContext& ctx, const std::string& endpoint) {
  if (r.cancelled) throw HubError(HubErrorKind::Cancelled, "download cancelled");
  std::string subject = ctx.what.empty() ? "request" : ctx.what;
  if (r.status == 0 || r.network_error) {
    throw HubError(HubErrorKind::Network, fmt::format("cannot reach the Hugging Face Hub at {} ({} for '{}'): {}",
                                                      endpoint, subject, ctx.repo, r.error));
  }
  std::string code = r.header("x-error-code");
  std::string detail = r.header("x-error-message");
  std::string body = json_error_text(r.body);
  if (!body.empty() && body != detail) detail += (detail.empty() ? "" : " ") + body;
  std::string req_id = r.header("x-request-id");
  if (!req_id.empty()) detail += " (request id " + req_id + ")";
  std::string tail = detail.empty() ? "" : ": " + detail;
  if (code == "RevisionNotFound") {
    throw HubError(HubErrorKind::RevisionNotFound,
                   fmt::format("revision '{}' was not found in repository '{}'{}", ctx.revision, ctx.repo, tail),
                   r.status);
  }
  if (code == "EntryNotFound") {
    throw HubError(HubErrorKind::EntryNotFound,
                   fmt::format("file '{}' was not found in repository '{}' at revision '{}'{}", ctx.path, ctx.repo,
                               ctx.revision, tail),
                   r.status);
  }
  if (code == "GatedRepo") {
    std::string hint = r.status == 401 ? "log in: set HF_TOKEN, or pass --token"
                                       : "request access on the model page with the account of your token";
    throw HubError(HubErrorKind::GatedRepo, fmt::format("repository '{}' is gated ({}){}", ctx.repo, hint, tail),
                   r.status);
  }
  if (r.header("x-error-message") == "Access to this resource is disabled.") {
    throw HubError(HubErrorKind::RepoNotFound, fmt::format("repository '{}' is disabled{}", ctx.repo, tail), r.status);
  }
  if (code == "RepoNotFound") {
    throw HubError(HubErrorKind::RepoNotFound,
                   fmt::format("repository '{}' was not found on {} (if it is private, set HF_TOKEN or pass --token){}",
                               ctx.repo, endpoint, tail),
                   r.status);
  }
  if (r.status == 401) {
    throw HubError(
        HubErrorKind::Unauthorized,
        fmt::format("not authorized for '{}' ({}): check the token (HF_TOKEN or --token){}", ctx.repo, subject, tail),
        r.status);
  }
  throw HubError(HubErrorKind::Http,
                 fmt::format("HTTP {} from {} ({} for '{}'{}){}", r.status, endpoint, subject, ctx.repo,
                             ctx.path.empty() ? "" : ", file '" + ctx.path + "'", tail),
                 r.status);
}

bool is_retryable(const HttpResult& r) {
  if (r.cancelled) return false;
  if (r.network_error) return true;
  return r.status == 429 || r.status == 500 || r.status == 502 || r.status == 503 || r.status == 504;
}

int retry_delay_ms(const RetryPolicy& p, int attempt, const HttpResult& r) {
  if (r.status == 429) {
    // RateLimit: "api";r=0;t=55  (t = seconds until the window resets), else Retry-After seconds.
    std::string rl = r.header("ratelimit");
    auto t = rl.find(";t=");
    long secs = -1;
    if (t != std::string::npos) secs = std::strtol(rl.c_str() + t + 3, nullptr, 10);
    if (secs < 0 && !r.header("retry-after").empty()) secs = std::strtol(r.header("retry-after").c_str(), nullptr, 10);
    if (secs >= 0) return static_cast<int>(std::min<long>(secs * 1000 + 100, p.max_retry_after_ms));
  }
  long d = static_cast<long>(p.base_delay_ms) << std::min(attempt, 20);
  return static_cast<int>(std::min<long>(d, p.max_delay_ms));
}

bool sleep_unless_cancelled(int ms, const std::atomic<bool>* cancel) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) {
    if (cancel && cancel->load()) return false;
    auto left = until - std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(20)));
  }
  return !(cancel && cancel->load());
}

HttpResult with_retries(const RetryPolicy& p, const std::atomic<bool>* cancel,
                        const std::function<HttpResult()>& attempt) {
  for (int i = 0;; ++i) {
    HttpResult r = attempt();
    if (!is_retryable(r) || i >= p.max_retries) return r;
    int delay = retry_delay_ms(p, i, r);
    LOG_DEBUG("hub: retrying after {} (attempt {}, {} ms)", r.status ? std::to_string(r.status) : r.error, i + 1,
              delay);
    if (!sleep_unless_cancelled(delay, cancel)) {
      r.cancelled = true;
      return r;
    }
  }
}

}  // namespace detail

std::vector<std::string> HubClient::Impl::auth_headers() const {
  if (settings.token.empty()) return {};
  return {"Authorization: Bearer " + settings.token};
}

void HubClient::Impl::check_online(const detail::ErrorContext& ctx) const {
  if (settings.offline) {
    throw HubError(HubErrorKind::NotCached,
                   fmt::format("offline mode (HF_HUB_OFFLINE) is on: cannot fetch the {} of '{}'", ctx.what, ctx.repo));
  }
}

std::string HubClient::Impl::get_api(const std::string& first_url, const detail::ErrorContext& ctx, std::string* next) {
  check_online(ctx);
  std::string url = first_url;
  detail::HttpResult r;
  for (int hop = 0;; ++hop) {
    // The token only goes to the endpoint's own origin (a pagination link could name another host).
    std::vector<std::string> headers;
    if (detail::url_origin(url) == detail::url_origin(settings.endpoint)) headers = auth_headers();
    headers.push_back("Accept: application/json");
    r = detail::with_retries(settings.retry, nullptr, [&] { return http.request("GET", url, headers, nullptr); });
    std::string location = r.header("location");
    // Renamed repos answer with a relative redirect; follow those only, like huggingface_hub.
    if (r.status >= 300 && r.status < 400 && !location.empty() && location.front() == '/' && hop < 5) {
      url = detail::url_base(url) + location;
      continue;
    }
    break;
  }
  if (r.status < 200 || r.status >= 300 || r.network_error || r.cancelled) {
    detail::raise_for_result(r, ctx, settings.endpoint);
  }
  if (next) {
    *next = next_link(r.header("link"));
    if (!next->empty() && next->front() == '/') *next = detail::url_base(settings.endpoint) + *next;
  }
  return std::move(r.body);
}

detail::FileMetadata HubClient::Impl::head_file(detail::HttpSession& http, const std::string& repo,
                                                const std::string& revision, const std::string& path,
                                                const std::atomic<bool>* cancel) {
  detail::ErrorContext ctx{repo, revision, path, "file metadata"};
  check_online(ctx);
  std::string url = settings.endpoint + "/" + repo + "/resolve/" + detail::url_quote(revision, false) + "/" +
                    detail::url_quote(path, true);
  auto headers = auth_headers();
  for (int hop = 0;; ++hop) {
    auto r = detail::with_retries(settings.retry, cancel, [&] { return http.request("HEAD", url, headers, cancel); });
    bool redirect = r.status >= 300 && r.status < 400;
    std::string location = r.header("location");
    if (redirect && !location.empty() && location.front() == '/' && hop < 5) {
      url = detail::url_base(url) + location;  // relative redirect: same host, keep auth
      continue;
    }
    if (!(r.status >= 200 && r.status < 300) && !redirect) detail::raise_for_result(r, ctx, settings.endpoint);
    detail::FileMetadata m;
    m.commit = r.header("x-repo-commit");
    std::string etag = r.header("x-linked-etag");
    if (etag.empty()) etag = r.header("etag");
    m.etag = detail::normalize_etag(etag);
    std::string size = r.header("x-linked-size");
    if (size.empty() && !redirect) size = r.header("content-length");
    if (m.commit.empty() || m.etag.empty() || size.empty()) {
      throw HubError(HubErrorKind::Http,
                     fmt::format("the server's answer for '{}' in '{}' lacks X-Repo-Commit, ETag or size headers "
                                 "(is HF_ENDPOINT={} a Hugging Face Hub?)",
                                 path, repo, settings.endpoint));
    }
    m.size = std::strtoull(size.c_str(), nullptr, 10);
    m.location = redirect && !location.empty() ? location : url;
    m.send_auth = detail::url_origin(m.location) == detail::url_origin(settings.endpoint);
    return m;
  }
}

HubClient::HubClient(HubSettings settings) : impl_(std::make_unique<Impl>(std::move(settings))) {}
HubClient::~HubClient() = default;

const HubSettings& HubClient::settings() const {
  return impl_->settings;
}

RepoRefs HubClient::list_refs(const std::string& repo_id) {
  return guard_json("refs", repo_id, impl_->settings.endpoint, [&] {
    validate_repo_id(repo_id);
    detail::ErrorContext ctx{repo_id, "", "", "refs"};
    auto j = json::parse(impl_->get_api(impl_->repo_api_url(repo_id) + "/refs", ctx), nullptr, false);
    if (!j.is_object()) throw HubError(HubErrorKind::Http, fmt::format("refs of '{}' are not a JSON object", repo_id));
    RepoRefs refs;
    for (const auto& b : j.value("branches", json::array())) refs.branches.push_back(parse_ref(b));
    for (const auto& t : j.value("tags", json::array())) refs.tags.push_back(parse_ref(t));
    return refs;
  });
}

std::string HubClient::resolve_revision(const std::string& repo_id, const std::string& revision) {
  return guard_json("model info", repo_id, impl_->settings.endpoint, [&] {
    validate_repo_id(repo_id);
    validate_revision(revision);
    detail::ErrorContext ctx{repo_id, revision, "", "model info"};
    std::string url = impl_->repo_api_url(repo_id) + "/revision/" + detail::url_quote(revision, false);
    auto j = json::parse(impl_->get_api(url, ctx), nullptr, false);
    std::string sha = j.is_object() ? j.value("sha", "") : "";
    if (!is_commit_hash(sha)) {
      throw HubError(HubErrorKind::Http,
                     fmt::format("model info of '{}' at '{}' has no valid 'sha' (commit) field", repo_id, revision));
    }
    return sha;
  });
}

std::vector<RepoFile> HubClient::list_files(const std::string& repo_id, const std::string& revision) {
  return guard_json("file list", repo_id, impl_->settings.endpoint, [&] {
    validate_repo_id(repo_id);
    validate_revision(revision);
    detail::ErrorContext ctx{repo_id, revision, "", "file list"};
    std::string url =
        impl_->repo_api_url(repo_id) + "/tree/" + detail::url_quote(revision, false) + "?recursive=true&expand=false";
    std::vector<RepoFile> files;
    for (int page = 0; !url.empty(); ++page) {
      if (page >= 100000) throw HubError(HubErrorKind::Http, fmt::format("too many pages listing '{}'", repo_id));
      std::string next;
      auto j = json::parse(impl_->get_api(url, ctx, &next), nullptr, false);
      if (!j.is_array()) {
        throw HubError(HubErrorKind::Http,
                       fmt::format("file list of '{}' at '{}' is not a JSON array", repo_id, revision));
      }
      for (const auto& e : j) {
        if (!e.is_object() || e.value("type", "") != "file") continue;
        RepoFile f;
        f.path = e.value("path", "");
        f.oid = e.value("oid", "");
        f.size = e.value("size", uint64_t{0});
        if (e.contains("lfs") && e["lfs"].is_object()) {
          f.lfs_sha256 = e["lfs"].value("oid", "");
          f.size = e["lfs"].value("size", f.size);
        }
        // Paths come from the server and become local paths: refuse anything that could escape.
        if (!is_safe_repo_path(f.path)) {
          LOG_WARN("hub: skipping file with unsafe path '{}' in '{}'", f.path, repo_id);
          continue;
        }
        files.push_back(std::move(f));
      }
      url = next;
    }
    return files;
  });
}

std::vector<ModelSummary> HubClient::search_models(const SearchQuery& q) {
  return guard_json("search", q.search, impl_->settings.endpoint, [&] {
    detail::ErrorContext ctx{"", "", "", "model search"};
    std::string url = impl_->settings.endpoint + "/api/models?";
    std::string params;
    auto add = [&](const std::string& k, const std::string& v) {
      params += (params.empty() ? "" : "&") + k + "=" + detail::url_quote(v, false);
    };
    if (!q.search.empty()) add("search", q.search);
    if (!q.author.empty()) add("author", q.author);
    for (const auto& f : q.filters) add("filter", f);
    if (!q.sort.empty()) add("sort", q.sort);
    int limit = std::max(1, q.limit);
    add("limit", std::to_string(std::min(limit, 1000)));
    url += params;
    std::vector<ModelSummary> out;
    while (!url.empty() && static_cast<int>(out.size()) < limit) {
      std::string next;
      auto j = json::parse(impl_->get_api(url, ctx, &next), nullptr, false);
      if (!j.is_array()) throw HubError(HubErrorKind::Http, "model search answer is not a JSON array");
      for (const auto& e : j) {
        if (!e.is_object() || static_cast<int>(out.size()) >= limit) continue;
        ModelSummary m;
        m.id = e.value("id", e.value("modelId", ""));
        auto slash = m.id.find('/');
        m.author = e.value("author", slash == std::string::npos ? "" : m.id.substr(0, slash));
        m.downloads = e.value("downloads", int64_t{0});
        m.likes = e.value("likes", int64_t{0});
        if (e.contains("tags") && e["tags"].is_array()) {
          for (const auto& t : e["tags"]) {
            if (t.is_string()) m.tags.push_back(t.get<std::string>());
          }
        }
        m.pipeline_tag = e.value("pipeline_tag", "");
        m.last_modified = e.value("lastModified", "");
        if (e.contains("gated"))
          m.gated = e["gated"].is_string() || (e["gated"].is_boolean() && e["gated"].get<bool>());
        m.is_private = e.value("private", false);
        out.push_back(std::move(m));
      }
      url = next;
    }
    return out;
  });
}

}  // namespace cypris::hub
