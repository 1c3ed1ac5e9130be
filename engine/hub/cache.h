// Layout of the Hugging Face hub cache, shared with Python's huggingface_hub:
//   <cache>/models--org--name/{blobs/<etag>, refs/<revision>, snapshots/<commit>/<path>}
//   <cache>/.locks/models--org--name/<etag>.lock
// plus small file helpers (atomic writes, relative symlinks, flock) used by the downloader.
#pragma once

#include <atomic>
#include <optional>
#include <string>

namespace cypris::hub {

// Checks "name" or "org/name" (letters, digits, '-', '_', '.'; no "..", no leading '-' or '.').
// Throws HubError(BadInput) naming the value otherwise.
void validate_repo_id(const std::string& repo_id);
// Rejects revisions containing "..", control characters or empty segments.
void validate_revision(const std::string& revision);
bool is_commit_hash(const std::string& s);  // ^[0-9a-f]{40}$
// A relative '/'-separated path with no empty, "." or ".." segment, backslash or control character:
// safe to join below a snapshot folder.
bool is_safe_repo_path(const std::string& path);

std::string repo_folder_name(const std::string& repo_id);  // "models--org--name"
std::string repo_cache_dir(const std::string& cache_dir, const std::string& repo_id);
std::string lock_dir(const std::string& cache_dir, const std::string& repo_id);

// Reads refs/<revision> (no stripping, like Python); nullopt when absent.
std::optional<std::string> read_ref(const std::string& repo_dir, const std::string& revision);
// Writes refs/<revision> atomically, without a trailing newline.
void write_ref(const std::string& repo_dir, const std::string& revision, const std::string& commit);
// The commit a revision names in the cache (a commit hash as is, else the ref); nullopt when unknown.
std::optional<std::string> cached_commit(const std::string& repo_dir, const std::string& revision);

// snapshots/<commit>/<path> -> ../../blobs/<blob> (one more ../ per folder level), replaced atomically.
void link_snapshot_file(const std::string& repo_dir, const std::string& commit, const std::string& path,
                        const std::string& blob);

void write_file_atomic(const std::string& path, const std::string& content);
std::string read_small_file(const std::string& path);  // throws HubError(Io)
void make_dirs(const std::string& dir);                // throws HubError(Io)
uint64_t free_disk_bytes(const std::string& dir);      // of the file system holding dir (or its parent)

// Exclusive flock on a lock file (created with mode 0664), released in the destructor. Waits while
// another process or thread holds it, checking `cancel` (HubError Cancelled) and `stop` between tries.
class FileLock {
 public:
  FileLock(const std::string& path, const std::atomic<bool>* cancel, const std::atomic<bool>* stop = nullptr);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace cypris::hub
