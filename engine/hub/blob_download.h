// Internal: fetches one blob robustly -- parallel ranged chunks for large files, resume from a
// sidecar state file, retries with backoff, fallback when the server ignores Range, verification
// against the ETag (sha256 or git sha1), and an atomic rename into place. The caller holds the lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/hub/hub.h"

namespace cypris::hub::detail {

struct BlobTask {
  std::string url;                   // where to GET (resolve URL or CDN location)
  std::vector<std::string> headers;  // auth headers when the URL is on the hub's origin
  uint64_t size = 0;
  std::string etag;        // expected hash (64 hex: sha256, 40 hex: git blob sha1)
  std::string final_path;  // published only after verification
  std::string part_path;   // preallocated partial file (our own name, not Python's)
  std::string state_path;  // sidecar: which chunks of part_path are complete
  std::string label;       // for messages (repo file path)
};

struct BlobParams {
  int parallel = 8;
  uint64_t chunk_size = 16ull << 20;
  uint64_t parallel_threshold = 64ull << 20;
  RetryPolicy retry;
  std::string user_agent;
  const std::atomic<bool>* cancel = nullptr;
  std::function<void()> on_verify;  // called before the hash check
};

// on_bytes(delta, from_network) reports progress (negative when bytes are thrown away, from_network
// false for bytes found on disk); it is called from worker
// threads and must be thread-safe. Returns the number of bytes fetched over the network.
uint64_t download_blob(const BlobTask& task, const BlobParams& params,
                       const std::function<void(int64_t, bool)>& on_bytes);

}  // namespace cypris::hub::detail
