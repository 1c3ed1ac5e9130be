// One blob: chunked, resumable, verified download (see blob_download.h).
//
// Partial data lives in <blob>.cypris-part (preallocated to the full size) with a sidecar
// <blob>.cypris-state listing finished chunks, so an interrupted download resumes with only the
// missing chunks. Python never reads these names (it uses .incomplete), so the two cannot mix.
#include "engine/hub/blob_download.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "engine/common/log.h"
#include "engine/hub/cache.h"
#include "engine/hub/client_impl.h"
#include "engine/hub/hash.h"
#include "engine/hub/http.h"

namespace fs = std::filesystem;

namespace cypris::hub::detail {
namespace {

// The server answered a ranged request for a middle chunk with the whole file.
struct RangeUnsupported {};
// A sibling chunk failed; this one stops quietly.
struct Stopped {};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string state_header(const BlobTask& t, uint64_t chunk) {
  return fmt::format("cypris-part v1 size={} chunk={} etag={}\n", t.size, chunk, t.etag);
}

// Finished chunk indices from the sidecar, or nothing when it does not match this download.
std::set<uint64_t> load_state(const BlobTask& t, uint64_t chunk) {
  std::set<uint64_t> done;
  std::error_code ec;
  if (!fs::is_regular_file(t.part_path, ec) || fs::file_size(t.part_path, ec) != t.size) return done;
  std::ifstream f(t.state_path);
  std::string line;
  if (!f || !std::getline(f, line) || line + "\n" != state_header(t, chunk)) return done;
  while (std::getline(f, line)) {
    if (line.empty() || line.find_first_not_of("0123456789") != std::string::npos) continue;  // torn write
    done.insert(std::stoull(line));
  }
  return done;
}

class StateFile {
 public:
  StateFile(const BlobTask& t, uint64_t chunk, bool fresh) {
    if (fresh) write_file_atomic(t.state_path, state_header(t, chunk));
    fd_ = ::open(t.state_path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd_ < 0)
      throw HubError(HubErrorKind::Io, fmt::format("cannot open {}: {}", t.state_path, std::strerror(errno)));
  }
  ~StateFile() { ::close(fd_); }
  void mark_done(uint64_t idx) {
    std::string line = std::to_string(idx) + "\n";
    std::lock_guard<std::mutex> lock(mu_);
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      LOG_WARN("hub: cannot record progress in a state file: {}", std::strerror(errno));
    }
  }

 private:
  int fd_ = -1;
  std::mutex mu_;
};

// Parses "bytes a-b/N" -> a; -1 when malformed.
int64_t content_range_start(const std::string& cr) {
  auto p = cr.find("bytes ");
  if (p == std::string::npos) return -1;
  return std::strtoll(cr.c_str() + p + 6, nullptr, 10);
}

struct FetchContext {
  const BlobTask& task;
  const BlobParams& params;
  int fd;
  const std::function<void(int64_t, bool)>& on_bytes;
  const std::atomic<bool>* stop;
};

// Fetches [start, end] into fd at the same offsets, resuming within the range after a dropped
// connection. When the range is the whole file, a 200 answer (Range ignored) restarts from 0.
void fetch_range(HttpSession& http, const FetchContext& c, uint64_t start, uint64_t end) {
  const bool whole = start == 0 && end + 1 == c.task.size;
  uint64_t pos = start;
  int failures = 0;
  for (int attempt = 0;; ++attempt) {
    uint64_t pos_before = pos;
    bool range_unsupported = false, bad_range = false, overflow = false;
    std::string io_error;
    auto headers = c.task.headers;
    headers.push_back(fmt::format("Range: bytes={}-{}", pos, end));
    auto on_head = [&](long status, const HttpHeaders& h) {
      if (status == 206) {
        auto it = h.find("content-range");
        if (it == h.end() || content_range_start(it->second) != static_cast<int64_t>(pos)) {
          bad_range = true;
          return false;
        }
        return true;
      }
      if (whole) {  // full body: start over
        if (pos > 0) c.on_bytes(-static_cast<int64_t>(pos), false);
        pos = 0;
        return true;
      }
      range_unsupported = true;
      return false;
    };
    auto on_data = [&](const char* d, size_t n) {
      if (pos + n > end + 1) {
        overflow = true;
        return false;
      }
      size_t off = 0;
      while (off < n) {
        ssize_t w = ::pwrite(c.fd, d + off, n - off, static_cast<off_t>(pos + off));
        if (w < 0) {
          if (errno == EINTR) continue;
          io_error = std::strerror(errno);
          return false;
        }
        off += static_cast<size_t>(w);
      }
      pos += n;
      c.on_bytes(static_cast<int64_t>(n), true);
      return true;
    };
    HttpResult r = http.stream(c.task.url, headers, on_head, on_data, c.params.cancel, c.stop);
    if (c.params.cancel && c.params.cancel->load()) throw HubError(HubErrorKind::Cancelled, "download cancelled");
    if (c.stop && c.stop->load()) throw Stopped{};
    if (!io_error.empty()) {
      throw HubError(HubErrorKind::Io, fmt::format("cannot write {}: {}", c.task.part_path, io_error));
    }
    if (range_unsupported) throw RangeUnsupported{};
    bool ok_status = r.status >= 200 && r.status < 300;
    if (ok_status && !r.network_error && !r.cancelled && !bad_range && !overflow && pos == end + 1) return;
    bool retry = r.network_error || is_retryable(r) || bad_range || overflow || (ok_status && pos != end + 1);
    if (!retry) raise_for_result(r, {"", "", c.task.label, "download of " + c.task.label}, url_base(c.task.url));
    if (bad_range || overflow) {
      LOG_WARN("hub: {}: the server answered bytes={}-{} with a wrong range; retrying", c.task.label, pos, end);
    }
    // Mid-stream failures reset the counter whenever data arrived, like huggingface_hub.
    failures = pos > pos_before ? 1 : failures + 1;
    if (failures > c.params.retry.max_retries) {
      if (r.network_error || ok_status) {
        throw HubError(HubErrorKind::Network,
                       fmt::format("download of '{}' failed after {} retries: {}", c.task.label,
                                   c.params.retry.max_retries, r.error.empty() ? "short or wrong body" : r.error));
      }
      raise_for_result(r, {"", "", c.task.label, "download of " + c.task.label}, url_base(c.task.url));
    }
    int delay = retry_delay_ms(c.params.retry, failures - 1, r);
    LOG_DEBUG("hub: {}: retry {} from byte {} in {} ms ({})", c.task.label, failures, pos, delay,
              r.error.empty() ? std::to_string(r.status) : r.error);
    if (!sleep_unless_cancelled(delay, c.params.cancel)) throw HubError(HubErrorKind::Cancelled, "download cancelled");
  }
}

// Downloads what is missing of part_path; returns bytes fetched.
uint64_t fill_part(const BlobTask& t, const BlobParams& p, const std::function<void(int64_t, bool)>& on_bytes,
                   bool single_stream) {
  uint64_t chunk = (!single_stream && t.size >= p.parallel_threshold && p.chunk_size > 0) ? p.chunk_size : t.size;
  uint64_t nchunks = (t.size + chunk - 1) / chunk;
  auto done = load_state(t, chunk);
  bool fresh = done.empty();
  Fd fd(::open(t.part_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | (fresh ? O_TRUNC : 0), 0644));
  if (fd.get() < 0)
    throw HubError(HubErrorKind::Io, fmt::format("cannot create {}: {}", t.part_path, std::strerror(errno)));
  if (::ftruncate(fd.get(), static_cast<off_t>(t.size)) != 0) {
    throw HubError(HubErrorKind::Io, fmt::format("cannot size {}: {}", t.part_path, std::strerror(errno)));
  }
  StateFile state(t, chunk, fresh);
  std::vector<uint64_t> pending;
  uint64_t resumed = 0;
  for (uint64_t i = 0; i < nchunks; ++i) {
    if (done.count(i)) {
      resumed += std::min(chunk, t.size - i * chunk);
    } else {
      pending.push_back(i);
    }
  }
  if (resumed > 0) {
    LOG_INFO("hub: resuming {} ({} of {} bytes already here)", t.label, resumed, t.size);
    on_bytes(static_cast<int64_t>(resumed), false);
  }
  std::atomic<uint64_t> fetched{0};
  std::function<void(int64_t, bool)> count = [&](int64_t d, bool net) {
    if (d > 0 && net) fetched += static_cast<uint64_t>(d);
    on_bytes(d, net);
  };
  std::atomic<bool> stop{false};
  std::atomic<size_t> next{0};
  std::mutex err_mu;
  std::exception_ptr first_error;
  bool range_unsupported = false;
  FetchContext ctx{t, p, fd.get(), count, &stop};
  auto worker = [&] {
    HttpSession http(p.user_agent);
    for (;;) {
      size_t k = next++;
      if (k >= pending.size() || stop.load()) return;
      uint64_t s = pending[k] * chunk, e = std::min(s + chunk, t.size) - 1;
      try {
        fetch_range(http, ctx, s, e);
        state.mark_done(pending[k]);
      } catch (const Stopped&) {
        return;
      } catch (const RangeUnsupported&) {
        std::lock_guard<std::mutex> lock(err_mu);
        range_unsupported = true;
        stop = true;
        return;
      } catch (...) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (!first_error) first_error = std::current_exception();
        stop = true;
        return;
      }
    }
  };
  size_t nthreads = std::min<size_t>(pending.size(), chunk < t.size ? static_cast<size_t>(std::max(1, p.parallel)) : 1);
  if (nthreads <= 1) {
    worker();
  } else {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < nthreads; ++i) threads.emplace_back(worker);
    for (auto& th : threads) th.join();
  }
  if (first_error) std::rethrow_exception(first_error);
  if (range_unsupported) {
    LOG_WARN("hub: the server ignores Range for {}; downloading it in one stream", t.label);
    // Throw away what the chunks counted; the single stream starts over.
    on_bytes(-static_cast<int64_t>(resumed + fetched.load()), false);
    std::error_code ec;
    fs::remove(t.state_path, ec);
    fs::remove(t.part_path, ec);
    return fetched.load() + fill_part(t, p, on_bytes, true);
  }
  return fetched.load();
}

}  // namespace

uint64_t download_blob(const BlobTask& t, const BlobParams& p, const std::function<void(int64_t, bool)>& on_bytes) {
  uint64_t fetched = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (t.size > 0) {
      fetched += fill_part(t, p, on_bytes, false);
    } else {
      std::ofstream(t.part_path, std::ios::binary | std::ios::trunc);
    }
    if (p.on_verify) p.on_verify();
    std::error_code ec;
    uint64_t have = fs::file_size(t.part_path, ec);
    if (!ec && have == t.size && file_matches_etag(t.part_path, t.etag)) {
      if (::rename(t.part_path.c_str(), t.final_path.c_str()) != 0) {
        throw HubError(HubErrorKind::Io,
                       fmt::format("cannot move {} into place: {}", t.part_path, std::strerror(errno)));
      }
      fs::remove(t.state_path, ec);
      return fetched;
    }
    LOG_WARN("hub: {} does not match its checksum {} (attempt {}); downloading it again", t.label, t.etag, attempt + 1);
    fs::remove(t.part_path, ec);
    fs::remove(t.state_path, ec);
    on_bytes(-static_cast<int64_t>(t.size), false);
  }
  throw HubError(HubErrorKind::Integrity,
                 fmt::format("downloaded '{}' twice and its content never matched the expected hash {} "
                             "(the server or a proxy corrupts it)",
                             t.label, t.etag));
}

}  // namespace cypris::hub::detail
