// Hugging Face Hub client: list refs and files, search models, and download snapshots into the
// standard Hugging Face cache (shared with Python tools) or a plain folder. Resumable, parallel,
// verified, and safe against a second process downloading the same blob.
//
// Threading: a HubClient may be used from one thread at a time (make one per thread otherwise).
// Progress callbacks are called from the download thread(s), one call at a time (serialized), and
// must return quickly and not call back into the client; a UI should copy the values and post them
// to its own thread. Cancel by setting the atomic flag given in DownloadOptions from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/common/error.h"

namespace cypris::hub {

enum class HubErrorKind {
  RepoNotFound,      // X-Error-Code RepoNotFound (or private without a token)
  RevisionNotFound,  // branch, tag or commit does not exist
  EntryNotFound,     // file does not exist at that revision
  GatedRepo,         // needs an accepted licence / a token with access
  Unauthorized,      // token rejected
  NotCached,         // offline mode (or downloads not allowed) and the cache lacks what is needed
  Network,           // connection failed after all retries
  Http,              // other HTTP error status
  Cancelled,         // the cancel flag was set
  Integrity,         // size or hash mismatch after retrying
  DiskFull,          // not enough free disk space for the download
  BadInput,          // malformed repo id, revision or argument
  Io,                // local file system error
};

const char* hub_error_kind_name(HubErrorKind kind);

class HubError : public Error {
 public:
  HubError(HubErrorKind kind, const std::string& what, long http_status = 0)
      : Error(what), kind_(kind), http_status_(http_status) {}
  HubErrorKind kind() const { return kind_; }
  long http_status() const { return http_status_; }

 private:
  HubErrorKind kind_;
  long http_status_;
};

struct RetryPolicy {
  int max_retries = 5;       // per request (429, 5xx, dropped connection)
  int base_delay_ms = 1000;  // exponential backoff: base, 2*base, ... capped at max_delay_ms
  int max_delay_ms = 8000;
  int max_retry_after_ms = 60000;  // cap on a server's Retry-After
};

struct HubSettings {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT, trailing '/' removed
  std::string token;                                // empty: anonymous
  std::string cache_dir;                            // HF_HUB_CACHE / $HF_HOME/hub / ~/.cache/huggingface/hub
  bool offline = false;                             // HF_HUB_OFFLINE
  std::string user_agent = "cypris/" CYPRIS_VERSION;
  RetryPolicy retry;
};

// Reads HF_ENDPOINT, HF_TOKEN (then HUGGING_FACE_HUB_TOKEN, then the token file $HF_TOKEN_PATH or
// $HF_HOME/token), HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE.
// A non-empty token_override wins over the environment.
HubSettings settings_from_env(const std::string& token_override = "");

struct GitRef {
  std::string name;           // "main", "v1.0"
  std::string ref;            // "refs/heads/main"
  std::string target_commit;  // 40 hex
};

struct RepoRefs {
  std::vector<GitRef> branches;
  std::vector<GitRef> tags;
};

struct RepoFile {
  std::string path;        // path in the repo, '/' separated
  uint64_t size = 0;       // real content size (also for LFS files)
  std::string oid;         // git blob id
  std::string lfs_sha256;  // empty for regular git files
  // Name of the blob in the cache (= normalised ETag): the LFS sha256 if any, else the git oid.
  const std::string& blob_name() const { return lfs_sha256.empty() ? oid : lfs_sha256; }
};

struct ModelSummary {
  std::string id;
  std::string author;
  int64_t downloads = 0;
  int64_t likes = 0;
  std::vector<std::string> tags;
  std::string pipeline_tag;
  std::string last_modified;
  bool gated = false;
  bool is_private = false;
};

struct SearchQuery {
  std::string search;  // substring of the repo id
  std::string author;
  std::vector<std::string> filters;  // tags, e.g. "gguf"
  std::string sort = "downloads";    // downloads, likes, createdAt, lastModified, trendingScore
  int limit = 50;                    // total results wanted (pages are followed up to this)
};

struct DownloadProgress {
  // Verifying: all bytes of `file` are here and its hash is being checked (seconds for big files).
  enum class Event { Progress, FileStarted, Verifying, FileFinished, Finished };
  Event event = Event::Progress;
  std::string file;  // current file (path in repo)
  uint64_t file_done = 0, file_total = 0;
  uint64_t done = 0, total = 0;  // over all selected files (cached ones count as done)
  double rate = 0;               // bytes/s fetched over the network in this run
  double eta_s = -1;             // -1: unknown
  double file_rate = 0;          // bytes/s for the current file
  double file_eta_s = -1;
  size_t files_done = 0, files_total = 0;
};
using ProgressCallback = std::function<void(const DownloadProgress&)>;

struct DownloadOptions {
  std::string revision = "main";
  // Globs (fnmatch: '*' also matches '/'; a pattern ending in '/' means the whole folder).
  // Empty include = the default set (weights, configs, tokenizer files; *.bin/*.pth/*.pt are
  // skipped when the repo has *.safetensors).
  std::vector<std::string> include;
  std::vector<std::string> exclude;
  std::string download_dir;      // non-empty: plain folder layout instead of the cache
  ProgressCallback on_progress;  // called from download threads, serialized
  const std::atomic<bool>* cancel = nullptr;
  int parallel = 8;                           // connections per large file
  uint64_t chunk_size = 16ull << 20;          // ranged chunk size for large files
  uint64_t parallel_threshold = 64ull << 20;  // files at least this big are fetched in chunks
  uint64_t reserve_bytes = 0;                 // extra free space to leave on the disk
  int max_workers = 8;                        // small files fetched at once (below parallel_threshold)
  int progress_interval_ms = 100;             // minimum time between Progress events (0: every write)
};

struct SnapshotResult {
  std::string path;               // snapshots/<commit> folder or the download dir
  std::string commit;             // 40 hex
  std::vector<RepoFile> files;    // selected files
  uint64_t bytes_downloaded = 0;  // bytes fetched over the network in this call
};

// Default include globs and the rule for *.bin; exposed for the UI and tests.
const std::vector<std::string>& default_include_patterns();
// Applies include/exclude globs (empty include = defaults + the .bin rule) to a file list.
std::vector<RepoFile> select_files(const std::vector<RepoFile>& files, const std::vector<std::string>& include,
                                   const std::vector<std::string>& exclude);

class HubClient {
 public:
  explicit HubClient(HubSettings settings = settings_from_env());
  ~HubClient();
  HubClient(const HubClient&) = delete;
  HubClient& operator=(const HubClient&) = delete;

  const HubSettings& settings() const;

  RepoRefs list_refs(const std::string& repo_id);
  // Branch, tag or (full) commit -> 40-hex commit.
  std::string resolve_revision(const std::string& repo_id, const std::string& revision);
  // All files at a revision, recursively (follows Link pagination).
  std::vector<RepoFile> list_files(const std::string& repo_id, const std::string& revision);
  std::vector<ModelSummary> search_models(const SearchQuery& query);

  // Downloads the selected files of a revision; files already present are not fetched again.
  // In offline mode serves the snapshot from the cache or throws HubError(NotCached).
  SnapshotResult snapshot_download(const std::string& repo_id, const DownloadOptions& options);

  // Downloads one file (like hf_hub_download) and returns its local path (snapshot symlink or the
  // file in download_dir). include/exclude are ignored. A missing file is HubError(EntryNotFound).
  std::string download_file(const std::string& repo_id, const std::string& filename, const DownloadOptions& options);

  struct Impl;  // public only for the implementation files

 private:
  std::unique_ptr<Impl> impl_;
};

// What the model loader calls. A local folder is returned as is. A repo id ("org/name") is looked
// up in the cache (refs/<revision> -> snapshots/<commit>, or a 40-hex commit directly); when
// allow_download is true and not offline, missing files are downloaded (default file set) into the
// cache or download_dir; files matching `exclude` (--ignore-patterns) are not downloaded. Throws
// HubError with a clear message otherwise.
std::string resolve_model_dir(const std::string& model_or_repo, const std::string& revision = "main",
                              const std::string& download_dir = "", bool allow_download = true,
                              const std::vector<std::string>& exclude = {});

}  // namespace cypris::hub
