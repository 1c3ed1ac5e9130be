// Hugging Face cache layout and file helpers (see cache.h).
#include "engine/hub/cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "engine/hub/hub.h"

namespace fs = std::filesystem;

namespace cypris::hub {
namespace {

bool valid_segment(const std::string& s) {
  if (s.empty() || s.size() > 96 || s == "." || s == ".." || s.find("..") != std::string::npos) return false;
  if (s.front() == '-' || s.front() == '.') return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

// Unique per process and call: a forked child inherits the parent's generator state, so the pid
// and a counter are part of the name.
std::string random_suffix() {
  static std::atomic<uint32_t> counter{0};
  static thread_local std::mt19937 rng{std::random_device{}()};
  return fmt::format("{:x}-{:x}-{:04x}", static_cast<unsigned>(::getpid()), counter++, rng() & 0xffff);
}

}  // namespace

void validate_repo_id(const std::string& repo_id) {
  auto slash = repo_id.find('/');
  bool ok = slash == std::string::npos
                ? valid_segment(repo_id)
                : (repo_id.find('/', slash + 1) == std::string::npos && valid_segment(repo_id.substr(0, slash)) &&
                   valid_segment(repo_id.substr(slash + 1)));
  if (!ok) {
    throw HubError(
        HubErrorKind::BadInput,
        fmt::format("invalid repo id '{}': expected 'name' or 'org/name' (letters, digits, '-', '_', '.')", repo_id));
  }
}

void validate_revision(const std::string& revision) {
  bool ok = !revision.empty() && revision.size() <= 256 && revision.find("..") == std::string::npos &&
            revision.front() != '/' && revision.back() != '/' && revision.find("//") == std::string::npos;
  for (char c : revision) {
    if (static_cast<unsigned char>(c) < 0x20 || c == '\\' || c == 0x7f) ok = false;
  }
  if (!ok) {
    throw HubError(HubErrorKind::BadInput,
                   fmt::format("invalid revision '{}': expected a branch, tag or commit hash", revision));
  }
}

bool is_commit_hash(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool is_safe_repo_path(const std::string& path) {
  if (path.empty() || path.size() > 4096) return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string seg = path.substr(start, end - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    start = end + 1;
  }
  for (char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == '\\') return false;
  }
  return true;
}

std::string repo_folder_name(const std::string& repo_id) {
  std::string out = "models";
  std::stringstream ss(repo_id);
  std::string part;
  while (std::getline(ss, part, '/')) out += "--" + part;
  return out;
}

std::string repo_cache_dir(const std::string& cache_dir, const std::string& repo_id) {
  return (fs::path(cache_dir) / repo_folder_name(repo_id)).string();
}

std::string lock_dir(const std::string& cache_dir, const std::string& repo_id) {
  return (fs::path(cache_dir) / ".locks" / repo_folder_name(repo_id)).string();
}

std::optional<std::string> read_ref(const std::string& repo_dir, const std::string& revision) {
  fs::path p = fs::path(repo_dir) / "refs" / revision;
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::nullopt;
  std::string s = read_small_file(p.string());
  if (!is_commit_hash(s)) return std::nullopt;  // foreign or damaged ref: treat as unknown
  return s;
}

void write_ref(const std::string& repo_dir, const std::string& revision, const std::string& commit) {
  fs::path p = fs::path(repo_dir) / "refs" / revision;
  if (auto cur = read_ref(repo_dir, revision); cur && *cur == commit) return;
  make_dirs(p.parent_path().string());
  write_file_atomic(p.string(), commit);
}

std::optional<std::string> cached_commit(const std::string& repo_dir, const std::string& revision) {
  if (is_commit_hash(revision)) return revision;
  return read_ref(repo_dir, revision);
}

void link_snapshot_file(const std::string& repo_dir, const std::string& commit, const std::string& path,
                        const std::string& blob) {
  fs::path link = fs::path(repo_dir) / "snapshots" / commit / path;
  make_dirs(link.parent_path().string());
  std::string target;
  for (char c : path) {
    if (c == '/') target += "../";
  }
  target += "../../blobs/";
  target += blob;
  fs::path tmp = link;
  tmp += fmt::format(".{}.tmp", random_suffix());
  if (::symlink(target.c_str(), tmp.c_str()) != 0) {
    throw HubError(HubErrorKind::Io, fmt::format("cannot create symlink {}: {}", tmp.string(), std::strerror(errno)));
  }
  if (::rename(tmp.c_str(), link.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw HubError(HubErrorKind::Io, fmt::format("cannot create {}: {}", link.string(), std::strerror(err)));
  }
}

void write_file_atomic(const std::string& path, const std::string& content) {
  std::string tmp = fmt::format("{}.{}.tmp", path, random_suffix());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << content;
    f.flush();
    if (!f) throw HubError(HubErrorKind::Io, fmt::format("cannot write {}", tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw HubError(HubErrorKind::Io, fmt::format("cannot write {}: {}", path, std::strerror(err)));
  }
}

std::string read_small_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw HubError(HubErrorKind::Io, fmt::format("cannot read {}", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw HubError(HubErrorKind::Io, fmt::format("cannot create folder {}: {}", dir, ec.message()));
}

uint64_t free_disk_bytes(const std::string& dir) {
  fs::path p(dir);
  std::error_code ec;
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  struct statvfs st {};
  if (::statvfs(p.empty() ? "." : p.c_str(), &st) != 0) return UINT64_MAX;  // unknown: do not block
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

FileLock::FileLock(const std::string& path, const std::atomic<bool>* cancel, const std::atomic<bool>* stop) {
  make_dirs(fs::path(path).parent_path().string());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0664);
  if (fd_ < 0)
    throw HubError(HubErrorKind::Io, fmt::format("cannot open lock file {}: {}", path, std::strerror(errno)));
  // Poll instead of blocking so a cancel request is honoured while another download holds the lock.
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      int err = errno;
      ::close(fd_);
      throw HubError(HubErrorKind::Io, fmt::format("cannot lock {}: {}", path, std::strerror(err)));
    }
    if ((cancel && cancel->load()) || (stop && stop->load())) {
      ::close(fd_);
      throw HubError(HubErrorKind::Cancelled, "download cancelled");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

}  // namespace cypris::hub
