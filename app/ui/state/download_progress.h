// Download progress aggregation for the Models panel: per-file and total bytes, transfer rate over
// a sliding window, and ETA. Time is passed in (seconds on any monotonic clock) so the arithmetic
// is testable without sleeping.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/ui/state/services.h"

namespace cypris {

class DownloadProgress {
 public:
  // Rate is averaged over the samples of the last `window_s` seconds.
  explicit DownloadProgress(double window_s = 5.0) : window_s_(window_s) {}

  // Starts a new download of these files (sizes from the hub listing; -1 if unknown).
  void start(const std::vector<HubFile>& files, double now_s);
  // A progress report for one file (a file not in the start() list is added).
  void update(const FileProgress& p, double now_s);

  struct FileRow {
    std::string path;
    int64_t done = 0;
    int64_t total = -1;
    bool finished = false;
    float fraction() const;  // 0..1; 0 while the size is unknown (1 once finished)
  };
  const std::vector<FileRow>& files() const { return files_; }

  int64_t bytes_done() const;
  int64_t bytes_total() const;                // sum of known sizes; -1 if any file size is unknown
  float fraction() const;                     // 0..1 over all files (by bytes when all sizes are known)
  double rate_bytes_per_s() const;            // 0 until two samples span some time
  std::optional<double> eta_seconds() const;  // empty while the rate or total is unknown
  bool all_finished() const;

 private:
  double window_s_;
  std::vector<FileRow> files_;
  std::deque<std::pair<double, int64_t>> samples_;  // (time, bytes_done)
};

// "1.5 GB", "820 MB", "12 KB", "512 B" (decimal units, like the hub shows them).
std::string format_bytes(int64_t bytes);
// "1 h 02 min", "3 min 05 s", "42 s".
std::string format_duration(double seconds);

}  // namespace cypris
