// snapshot_download (cache or plain folder), offline resolution, and resolve_model_dir.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "engine/common/log.h"
#include "engine/hub/blob_download.h"
#include "engine/hub/cache.h"
#include "engine/hub/client_impl.h"

namespace fs = std::filesystem;

namespace cypris::hub {
namespace {

// Aggregates byte counts from the download threads and calls the user's callback, serialized and
// throttled (Progress events at most every interval; file start/verify/finish always). Several
// files can be in flight; each event describes the file that caused it.
class Progress {
 public:
  Progress(const ProgressCallback& cb, uint64_t total, size_t files_total, int interval_ms)
      : cb_(cb), interval_(std::chrono::milliseconds(std::max(0, interval_ms))) {
    p_.total = total;
    p_.files_total = files_total;
    start_ = std::chrono::steady_clock::now();
  }
  void file_started(const RepoFile& f) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& st = files_[f.path];
    st = FileState{};
    st.total = f.size;
    st.start = std::chrono::steady_clock::now();
    emit(DownloadProgress::Event::FileStarted, f.path);
  }
  // network=false: bytes found on disk (resumed) or thrown away; they do not count for the rate.
  void add(const std::string& path, int64_t delta, bool network) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& st = files_[path];
    st.done = static_cast<uint64_t>(std::max<int64_t>(0, static_cast<int64_t>(st.done) + delta));
    p_.done = static_cast<uint64_t>(std::max<int64_t>(0, static_cast<int64_t>(p_.done) + delta));
    if (network && delta > 0) {
      net_ += delta;
      st.net += delta;
    }
    if (std::chrono::steady_clock::now() - last_emit_ >= interval_) emit(DownloadProgress::Event::Progress, path);
  }
  // The file starts counting again (its bytes so far were already reported).
  void restart_file(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& st = files_[path];
    p_.done -= std::min(p_.done, st.done);
    st.done = 0;
  }
  void verifying(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    emit(DownloadProgress::Event::Verifying, path);
  }
  void file_finished(const RepoFile& f, uint64_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& st = files_[f.path];
    // Whatever was not counted (a cached file) is done now.
    if (st.done < size) p_.done += size - st.done;
    st.done = st.total = size;
    p_.files_done++;
    emit(DownloadProgress::Event::FileFinished, f.path);
    files_.erase(f.path);
  }
  void finished() {
    std::lock_guard<std::mutex> lock(mu_);
    p_.done = p_.total;
    p_.file.clear();
    p_.file_done = p_.file_total = 0;
    p_.file_rate = 0;
    p_.file_eta_s = -1;
    emit(DownloadProgress::Event::Finished, "");
  }

 private:
  struct FileState {
    uint64_t done = 0, total = 0;
    int64_t net = 0;
    std::chrono::steady_clock::time_point start;
  };

  void emit(DownloadProgress::Event ev, const std::string& path) {
    auto now = std::chrono::steady_clock::now();
    last_emit_ = now;
    double secs = std::chrono::duration<double>(now - start_).count();
    p_.rate = secs > 0.2 ? static_cast<double>(std::max<int64_t>(net_, 0)) / secs : 0;
    p_.eta_s = p_.rate > 0 ? static_cast<double>(p_.total - std::min(p_.done, p_.total)) / p_.rate : -1;
    auto it = files_.find(path);
    if (it != files_.end()) {
      const auto& st = it->second;
      double fsecs = std::chrono::duration<double>(now - st.start).count();
      p_.file = path;
      p_.file_done = st.done;
      p_.file_total = st.total;
      p_.file_rate = fsecs > 0.2 ? static_cast<double>(std::max<int64_t>(st.net, 0)) / fsecs : 0;
      p_.file_eta_s =
          p_.file_rate > 0 ? static_cast<double>(st.total - std::min(st.done, st.total)) / p_.file_rate : -1;
    }
    p_.event = ev;
    if (!cb_) return;
    try {
      cb_(p_);
    } catch (const std::exception& e) {
      LOG_WARN("hub: progress callback threw: {}", e.what());
    }
  }

  const ProgressCallback& cb_;
  std::chrono::steady_clock::duration interval_;
  std::mutex mu_;
  DownloadProgress p_;
  std::map<std::string, FileState> files_;
  std::chrono::steady_clock::time_point start_, last_emit_;
  int64_t net_ = 0;
};

bool is_file_of_size(const fs::path& p, uint64_t size) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && fs::file_size(p, ec) == size && !ec;
}

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

// Files under a snapshot folder; a dangling link (blob missing) is an error naming the file.
std::vector<RepoFile> scan_snapshot(const fs::path& snap, const std::string& repo, bool skip_hidden) {
  std::vector<RepoFile> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(snap, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::string rel = it->path().lexically_relative(snap).generic_string();
    if (skip_hidden && rel.rfind(".cache", 0) == 0) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_directory(ec)) continue;
    if (!fs::exists(it->path(), ec)) {
      throw HubError(HubErrorKind::NotCached,
                     fmt::format("file '{}' of '{}' is missing from the cache ({} points to a blob that is gone); "
                                 "download it again while online",
                                 rel, repo, it->path().string()));
    }
    RepoFile f;
    f.path = rel;
    f.size = fs::file_size(it->path(), ec);
    out.push_back(std::move(f));
  }
  return out;
}

// Brings `files` of `commit` into the cache (or download_dir) and returns the snapshot folder.
// known_meta: the HEAD answer for a single file, when the caller already has it.
std::string fetch_files(HubClient::Impl& impl, const std::string& repo, const std::string& commit,
                        const std::vector<RepoFile>& files, const DownloadOptions& opt,
                        const detail::FileMetadata* known_meta, uint64_t* bytes_downloaded) {
  const auto& s = impl.settings;
  const bool to_dir = !opt.download_dir.empty();
  const std::string repo_dir = repo_cache_dir(s.cache_dir, repo);
  const fs::path snap = to_dir ? fs::path(opt.download_dir) : fs::path(repo_dir) / "snapshots" / commit;
  const fs::path blobs = fs::path(repo_dir) / "blobs";
  const fs::path meta_dir = fs::path(opt.download_dir) / ".cache" / "huggingface" / "download";
  auto target_of = [&](const RepoFile& f) { return to_dir ? snap / f.path : blobs / f.blob_name(); };
  auto dir_meta_ok = [&](const RepoFile& f) {
    std::error_code ec;
    fs::path m = meta_dir / (f.path + ".metadata");
    if (!fs::is_regular_file(m, ec)) return false;
    std::string text = read_small_file(m.string());
    auto nl = text.find('\n');
    return nl != std::string::npos && text.substr(nl + 1, text.find('\n', nl + 1) - nl - 1) == f.blob_name();
  };
  auto present = [&](const RepoFile& f) {
    return is_file_of_size(target_of(f), f.size) && (!to_dir || dir_meta_ok(f));
  };

  // Free space: everything not yet present must fit, plus the reserve the user asked for.
  uint64_t need = opt.reserve_bytes, total = 0;
  for (const auto& f : files) {
    total += f.size;
    if (!present(f)) need += f.size;
  }
  const std::string space_dir = to_dir ? snap.string() : s.cache_dir;
  uint64_t free_bytes = free_disk_bytes(space_dir);
  if (need > free_bytes) {
    throw HubError(HubErrorKind::DiskFull, fmt::format("not enough free disk space in {} for '{}': need {}, {} free",
                                                       space_dir, repo, human_bytes(need), human_bytes(free_bytes)));
  }

  make_dirs(snap.string());
  if (!to_dir) {
    make_dirs(blobs.string());
    fs::path tag = fs::path(s.cache_dir) / "CACHEDIR.TAG";
    std::error_code ec;
    if (!fs::exists(tag, ec)) {
      // Backup tools skip folders with this tag (https://bford.info/cachedir/); Python writes the same.
      write_file_atomic(tag.string(),
                        "Signature: 8a477f597d28d172789f06886806bc55\n"
                        "# This file is a cache directory tag created by huggingface_hub.\n"
                        "# For information about cache directory tags, see:\n"
                        "#\thttps://bford.info/cachedir/\n");
    }
  }

  Progress progress(opt.on_progress, total, files.size(), opt.progress_interval_ms);
  std::atomic<uint64_t> fetched{0};
  std::atomic<bool> failed{false};

  // One file: link it if its blob is here, else HEAD, lock, download, verify, publish.
  auto fetch_one = [&](detail::HttpSession& http, const RepoFile& f) {
    if (opt.cancel && opt.cancel->load()) throw HubError(HubErrorKind::Cancelled, "download cancelled");
    progress.file_started(f);
    fs::path pointer = snap / f.path;
    std::error_code ec;
    if (!to_dir && is_file_of_size(pointer, f.size) && fs::is_symlink(pointer, ec) &&
        fs::read_symlink(pointer, ec).filename().string() == f.blob_name()) {
      progress.file_finished(f, f.size);
      return;
    }
    if (present(f)) {
      if (!to_dir) link_snapshot_file(repo_dir, commit, f.path, f.blob_name());
      progress.file_finished(f, f.size);
      return;
    }
    auto meta = known_meta ? *known_meta : impl.head_file(http, repo, commit, f.path, opt.cancel);
    if (meta.etag != f.blob_name() || meta.size != f.size) {
      LOG_WARN("hub: '{}' listed as {} ({} bytes) but served as {} ({} bytes); using the served one", f.path,
               f.blob_name(), f.size, meta.etag, meta.size);
    }
    detail::BlobTask task;
    task.url = meta.location;
    if (meta.send_auth) task.headers = impl.auth_headers();
    task.size = meta.size;
    task.etag = meta.etag;
    task.label = repo + "/" + f.path;
    fs::path lock_path;
    if (to_dir) {
      task.final_path = (snap / f.path).string();
      task.part_path = (meta_dir / (f.path + ".cypris-part")).string();
      task.state_path = (meta_dir / (f.path + ".cypris-state")).string();
      lock_path = meta_dir / (f.path + ".lock");
      make_dirs(fs::path(task.final_path).parent_path().string());
      make_dirs(fs::path(task.part_path).parent_path().string());
    } else {
      task.final_path = (blobs / meta.etag).string();
      task.part_path = (blobs / (meta.etag + ".cypris-part")).string();
      task.state_path = (blobs / (meta.etag + ".cypris-state")).string();
      lock_path = fs::path(lock_dir(s.cache_dir, repo)) / (meta.etag + ".lock");
    }
    detail::BlobParams params;
    params.parallel = opt.parallel;
    params.chunk_size = opt.chunk_size;
    params.parallel_threshold = opt.parallel_threshold;
    params.retry = s.retry;
    params.user_agent = s.user_agent;
    params.cancel = opt.cancel;
    params.on_verify = [&progress, &f] { progress.verifying(f.path); };
    {
      FileLock lock(lock_path.string(), opt.cancel, &failed);
      // Another process or thread may have finished this blob while we waited for the lock.
      bool done = present(f);
      for (int attempt = 0; !done; ++attempt) {
        try {
          fetched += detail::download_blob(task, params, [&](int64_t d, bool net) { progress.add(f.path, d, net); });
          done = true;
        } catch (const HubError& e) {
          // A signed CDN URL can expire during a long download: ask the hub for a fresh one once.
          bool expired =
              e.kind() == HubErrorKind::Http && (e.http_status() == 403 || e.http_status() == 410) && !meta.send_auth;
          if (!expired || attempt > 0) throw;
          LOG_WARN("hub: {} (the download URL may have expired); asking the hub for a new one", e.what());
          auto fresh = impl.head_file(http, repo, commit, f.path, opt.cancel);
          if (fresh.etag != meta.etag) throw;
          task.url = fresh.location;
          progress.restart_file(f.path);
        }
      }
      if (to_dir) {
        write_file_atomic(
            (meta_dir / (f.path + ".metadata")).string(),
            fmt::format("{}\n{}\n{:.3f}\n", commit, meta.etag,
                        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()));
      } else {
        link_snapshot_file(repo_dir, commit, f.path, meta.etag);
      }
    }
    progress.file_finished(f, meta.size);
  };

  // Small files go several at a time (each costs round trips more than bandwidth); large files
  // then go one at a time, each split into parallel ranged chunks.
  std::vector<const RepoFile*> small, large;
  for (const auto& f : files) (f.size >= opt.parallel_threshold ? large : small).push_back(&f);
  size_t nworkers = std::min<size_t>(small.size(), static_cast<size_t>(std::max(1, opt.max_workers)));
  if (nworkers <= 1) {
    for (const auto* f : small) fetch_one(impl.http, *f);
  } else {
    std::atomic<size_t> next{0};
    std::mutex err_mu;
    std::exception_ptr first_error;
    auto worker = [&] {
      detail::HttpSession http(s.user_agent);
      for (size_t k; !failed.load() && (k = next++) < small.size();) {
        try {
          fetch_one(http, *small[k]);
        } catch (...) {
          std::lock_guard<std::mutex> lock(err_mu);
          if (!first_error) first_error = std::current_exception();
          failed = true;
        }
      }
    };
    std::vector<std::thread> threads;
    for (size_t i = 0; i < nworkers; ++i) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
    if (first_error) std::rethrow_exception(first_error);
  }
  for (const auto* f : large) fetch_one(impl.http, *f);
  if (bytes_downloaded) *bytes_downloaded += fetched.load();
  progress.finished();
  return snap.string();
}

// The snapshot as the cache (or download_dir) holds it, without the network. `why` starts each
// error message ("offline mode (HF_HUB_OFFLINE) is on", "the hub cannot be reached").
SnapshotResult cached_snapshot(const HubSettings& s, const std::string& repo, const DownloadOptions& opt,
                               const std::string& why) {
  const bool to_dir = !opt.download_dir.empty();
  const std::string repo_dir = repo_cache_dir(s.cache_dir, repo);
  SnapshotResult res;
  fs::path snap;
  if (to_dir) {
    snap = opt.download_dir;
  } else {
    auto commit = cached_commit(repo_dir, opt.revision);
    if (!commit) {
      throw HubError(HubErrorKind::NotCached,
                     fmt::format("{} and revision '{}' of '{}' is not in the cache {} (no refs/{}); download it "
                                 "first while online",
                                 why, opt.revision, repo, s.cache_dir, opt.revision));
    }
    res.commit = *commit;
    snap = fs::path(repo_dir) / "snapshots" / *commit;
  }
  std::error_code ec;
  if (!fs::is_directory(snap, ec)) {
    throw HubError(HubErrorKind::NotCached,
                   fmt::format("{} and '{}' at '{}' is not downloaded ({} does not exist); download it first while "
                               "online",
                               why, repo, opt.revision, snap.string()));
  }
  auto present = scan_snapshot(snap, repo, to_dir);
  for (const auto& pattern : opt.include) {
    if (select_files(present, {pattern}, {}).empty()) {
      throw HubError(HubErrorKind::NotCached,
                     fmt::format("{} and no file matching '{}' of '{}' is in {}", why, pattern, repo, snap.string()));
    }
  }
  res.files = select_files(present, opt.include, opt.exclude);
  res.path = snap.string();
  return res;
}

}  // namespace

SnapshotResult HubClient::snapshot_download(const std::string& repo, const DownloadOptions& opt) {
  validate_repo_id(repo);
  validate_revision(opt.revision);
  const auto& s = impl_->settings;
  const bool to_dir = !opt.download_dir.empty();
  const std::string repo_dir = repo_cache_dir(s.cache_dir, repo);
  if (s.offline) return cached_snapshot(s, repo, opt, "offline mode (HF_HUB_OFFLINE) is on");

  SnapshotResult res;
  try {
    res.commit = resolve_revision(repo, opt.revision);
  } catch (const HubError& e) {
    // Like huggingface_hub: when the hub cannot be reached, a cached snapshot of that revision is used.
    // Errors that need the user (missing repo, gated, bad token) are never hidden this way.
    bool unreachable = e.kind() == HubErrorKind::Network || (e.kind() == HubErrorKind::Http && e.http_status() >= 500);
    if (!unreachable) throw;
    try {
      auto cached = cached_snapshot(s, repo, opt, e.what());
      LOG_WARN("hub: {}; using the cached snapshot {}", e.what(), cached.path);
      return cached;
    } catch (const HubError&) {
      throw e;
    }
  }
  res.files = select_files(list_files(repo, res.commit), opt.include, opt.exclude);
  if (res.files.empty()) {
    LOG_WARN("hub: no file of '{}' at '{}' matches the include/exclude patterns", repo, opt.revision);
  }
  if (!to_dir && opt.revision != res.commit) {
    // The snapshot folder exists before the ref names it, as huggingface_hub's scan_cache_dir expects.
    make_dirs((fs::path(repo_dir) / "snapshots" / res.commit).string());
    write_ref(repo_dir, opt.revision, res.commit);
  }
  res.path = fetch_files(*impl_, repo, res.commit, res.files, opt, nullptr, &res.bytes_downloaded);
  return res;
}

std::string HubClient::download_file(const std::string& repo, const std::string& filename, const DownloadOptions& opt) {
  validate_repo_id(repo);
  validate_revision(opt.revision);
  if (!is_safe_repo_path(filename)) {
    throw HubError(HubErrorKind::BadInput,
                   fmt::format("invalid file name '{}': a path inside the repo is expected", filename));
  }
  const auto& s = impl_->settings;
  const bool to_dir = !opt.download_dir.empty();
  if (s.offline) {
    fs::path p;
    if (to_dir) {
      p = fs::path(opt.download_dir) / filename;
    } else if (auto commit = cached_commit(repo_cache_dir(s.cache_dir, repo), opt.revision)) {
      p = fs::path(repo_cache_dir(s.cache_dir, repo)) / "snapshots" / *commit / filename;
    }
    std::error_code ec;
    if (p.empty() || !fs::exists(p, ec)) {
      throw HubError(
          HubErrorKind::NotCached,
          fmt::format("offline mode (HF_HUB_OFFLINE) is on and file '{}' of '{}' at '{}' is not in the cache "
                      "{}; download it first while online",
                      filename, repo, opt.revision, to_dir ? opt.download_dir : s.cache_dir));
    }
    return p.string();
  }
  auto meta = impl_->head_file(impl_->http, repo, opt.revision, filename, opt.cancel);
  RepoFile f;
  f.path = filename;
  f.size = meta.size;
  f.oid = meta.etag;
  if (meta.etag.size() == 64) f.lfs_sha256 = meta.etag;
  if (!to_dir && opt.revision != meta.commit) {
    make_dirs((fs::path(repo_cache_dir(s.cache_dir, repo)) / "snapshots" / meta.commit).string());
    write_ref(repo_cache_dir(s.cache_dir, repo), opt.revision, meta.commit);
  }
  std::string dir = fetch_files(*impl_, repo, meta.commit, {f}, opt, &meta, nullptr);
  return (fs::path(dir) / filename).string();
}

std::string resolve_model_dir(const std::string& model_or_repo, const std::string& revision,
                              const std::string& download_dir, bool allow_download,
                              const std::vector<std::string>& exclude) {
  std::error_code ec;
  if (fs::is_directory(model_or_repo, ec)) return model_or_repo;
  bool looks_like_path = model_or_repo.empty() || model_or_repo.front() == '/' || model_or_repo.front() == '.' ||
                         model_or_repo.front() == '~' ||
                         std::count(model_or_repo.begin(), model_or_repo.end(), '/') > 1;
  if (looks_like_path) {
    throw HubError(HubErrorKind::BadInput,
                   fmt::format("model folder '{}' does not exist (expected a local folder or a Hugging Face repo id "
                               "like 'org/name')",
                               model_or_repo));
  }
  validate_repo_id(model_or_repo);
  const std::string rev = revision.empty() ? "main" : revision;
  validate_revision(rev);
  HubClient client(settings_from_env());
  const auto& s = client.settings();

  // What the cache already holds, if it looks like a loadable model folder.
  std::string cached;
  std::string missing_reason;
  fs::path snap;
  if (!download_dir.empty()) {
    snap = download_dir;
  } else if (auto commit = cached_commit(repo_cache_dir(s.cache_dir, model_or_repo), rev)) {
    snap = fs::path(repo_cache_dir(s.cache_dir, model_or_repo)) / "snapshots" / *commit;
  }
  if (!snap.empty() && fs::is_directory(snap, ec)) {
    try {
      auto files = scan_snapshot(snap, model_or_repo, !download_dir.empty());
      bool has_config = false, has_gguf = false;
      for (const auto& f : files) {
        has_config |= f.path == "config.json";
        has_gguf |= f.path.size() > 5 && f.path.compare(f.path.size() - 5, 5, ".gguf") == 0;
      }
      if (has_config || has_gguf) {
        cached = snap.string();
      } else {
        missing_reason = fmt::format("file 'config.json' of '{}' is not in {}", model_or_repo, snap.string());
      }
    } catch (const HubError& e) {
      missing_reason = e.what();
    }
  } else {
    missing_reason = snap.empty()
                         ? fmt::format("revision '{}' of '{}' is not in the cache {}", rev, model_or_repo, s.cache_dir)
                         : fmt::format("{} does not exist", snap.string());
  }

  if (allow_download && !s.offline) {
    DownloadOptions opt;
    opt.revision = rev;
    opt.download_dir = download_dir;
    opt.exclude = exclude;
    try {
      return client.snapshot_download(model_or_repo, opt).path;
    } catch (const HubError& e) {
      if (e.kind() == HubErrorKind::Network && !cached.empty()) {
        LOG_WARN("hub: {}; using the cached copy in {}", e.what(), cached);
        return cached;
      }
      throw;
    }
  }
  if (!cached.empty()) return cached;
  throw HubError(HubErrorKind::NotCached,
                 fmt::format("{}: {}; run `cypris download {}{}` while online",
                             s.offline ? "offline mode (HF_HUB_OFFLINE) is on" : "downloads are disabled",
                             missing_reason, model_or_repo, rev == "main" ? "" : " --revision " + rev));
}

}  // namespace cypris::hub
