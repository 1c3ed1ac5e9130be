// A fake Hugging Face Hub for tests: a real HTTP server on 127.0.0.1 (ephemeral port, own thread)
// that serves repos from a folder with the Hub's protocol -- API JSON (model info, refs, tree with
// Link pagination, commits, search), resolve with HEAD/GET, ETag / X-Repo-Commit / X-Linked-*,
// a 302 to a separate "CDN" server (second port) for LFS files, Range/206, X-Error-Code errors --
// plus fault switches (dropped connections, ignored Range, 429, 503, corrupted bytes).
// Repos are written by the test itself with write_fake_repo() from a small in-memory description.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cypris::test {

struct FakeFile {
  std::string path;  // in the repo, '/' separated
  std::string content;
  bool lfs = false;  // LFS: served through the CDN, ETag = sha256; else ETag = git blob sha1
};

struct FakeCommit {
  std::string message;
  std::vector<FakeFile> files;  // the whole tree at this commit
};

struct FakeRepoSpec {
  std::string id;                          // "org/name" or "name"
  std::vector<FakeCommit> commits;         // oldest first
  std::map<std::string, size_t> branches;  // name -> index into commits
  std::map<std::string, size_t> tags;
  bool gated = false;
  std::string access_token;  // the token allowed to read a gated repo
  int64_t downloads = 0;
  std::vector<std::string> model_tags;
};

// Writes <root>/<repo id>/repo.json and objects/; returns the commit ids (oldest first).
std::vector<std::string> write_fake_repo(const std::string& root, const FakeRepoSpec& spec);

// Independent helpers for expectations (OpenSSL).
std::string fake_sha256_hex(const std::string& data);
std::string fake_git_blob_sha1(const std::string& data);

// Each counter is consumed by one file-body GET (resolve of a git file, or the CDN).
struct FakeHubFaults {
  std::atomic<int> drop_count{0};  // drop the connection after drop_after_bytes bytes
  std::atomic<int> drop_after_bytes{0};
  std::atomic<bool> ignore_range{false};   // answer 200 with the whole file to ranged requests
  std::atomic<int> rate_limit_count{0};    // answer 429 (Retry-After: 1)
  std::atomic<int> server_error_count{0};  // answer 503
  std::atomic<int> corrupt_count{0};       // flip one byte of the body
  std::atomic<bool> corrupt_always{false};
  std::atomic<int> api_rate_limit_count{0};    // 429 on API (JSON) requests
  std::atomic<int> api_malformed_count{0};     // API answers JSON of the wrong shape and types
  std::atomic<int> cdn_expired_count{0};       // CDN answers 403 (an expired signed URL)
  std::atomic<bool> relative_redirect{false};  // git files: 307 to /api/resolve-cache/... first
};

struct FakeRequest {
  std::string server;  // "hub" or "cdn"
  std::string method;
  std::string target;  // raw path and query
  std::string range;   // Range header or ""
  std::string authorization;
  int status = 0;
};

class FakeHub {
 public:
  explicit FakeHub(std::string root);
  ~FakeHub();
  FakeHub(const FakeHub&) = delete;
  FakeHub& operator=(const FakeHub&) = delete;

  void start();  // binds both servers and waits until they accept connections
  void stop();   // idempotent

  std::string endpoint() const;  // http://127.0.0.1:<port>
  int port() const;
  int cdn_port() const;
  FakeHubFaults& faults();
  void set_page_size(size_t n);  // tree and search pages (default 1000)
  // Requests naming old_id get a relative 307 to the same URL with new_id (a renamed repo).
  void add_rename(const std::string& old_id, const std::string& new_id);

  std::vector<FakeRequest> requests() const;
  void clear_requests();
  // Number of recorded requests matching the predicate.
  size_t count_requests(const std::function<bool(const FakeRequest&)>& pred) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cypris::test
