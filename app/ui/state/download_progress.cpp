// DownloadProgress; see download_progress.h.
#include "app/ui/state/download_progress.h"

#include <fmt/format.h>

#include <cmath>

namespace cypris {

float DownloadProgress::FileRow::fraction() const {
  if (finished) return 1.0f;
  if (total <= 0) return 0.0f;
  return static_cast<float>(static_cast<double>(done) / static_cast<double>(total));
}

void DownloadProgress::start(const std::vector<HubFile>& files, double now_s) {
  files_.clear();
  samples_.clear();
  for (const auto& f : files) files_.push_back(FileRow{f.path, 0, f.size, false});
  samples_.emplace_back(now_s, 0);
}

void DownloadProgress::update(const FileProgress& p, double now_s) {
  FileRow* row = nullptr;
  for (auto& f : files_) {
    if (f.path == p.path) row = &f;
  }
  if (!row) {
    files_.push_back(FileRow{p.path, 0, p.bytes_total, false});
    row = &files_.back();
  }
  row->done = p.bytes_done;
  if (p.bytes_total >= 0) row->total = p.bytes_total;
  row->finished = p.finished;
  if (row->finished && row->total < 0) row->total = row->done;

  samples_.emplace_back(now_s, bytes_done());
  // Keep one sample older than the window so the rate spans the whole window.
  while (samples_.size() > 2 && samples_[1].first <= now_s - window_s_) samples_.pop_front();
}

int64_t DownloadProgress::bytes_done() const {
  int64_t sum = 0;
  for (const auto& f : files_) sum += f.done;
  return sum;
}

int64_t DownloadProgress::bytes_total() const {
  int64_t sum = 0;
  for (const auto& f : files_) {
    if (f.total < 0) return -1;
    sum += f.total;
  }
  return sum;
}

float DownloadProgress::fraction() const {
  if (files_.empty()) return 0.0f;
  int64_t total = bytes_total();
  if (total > 0) return static_cast<float>(static_cast<double>(bytes_done()) / static_cast<double>(total));
  // Sizes unknown: count finished files.
  size_t n = 0;
  for (const auto& f : files_) n += f.finished ? 1 : 0;
  return static_cast<float>(n) / static_cast<float>(files_.size());
}

double DownloadProgress::rate_bytes_per_s() const {
  if (samples_.size() < 2) return 0.0;
  double dt = samples_.back().first - samples_.front().first;
  if (dt <= 0.0) return 0.0;
  double db = static_cast<double>(samples_.back().second - samples_.front().second);
  return db > 0.0 ? db / dt : 0.0;
}

std::optional<double> DownloadProgress::eta_seconds() const {
  int64_t total = bytes_total();
  double rate = rate_bytes_per_s();
  if (total < 0 || rate <= 0.0) return std::nullopt;
  int64_t left = total - bytes_done();
  return left <= 0 ? 0.0 : static_cast<double>(left) / rate;
}

bool DownloadProgress::all_finished() const {
  if (files_.empty()) return false;
  for (const auto& f : files_) {
    if (!f.finished) return false;
  }
  return true;
}

std::string format_bytes(int64_t bytes) {
  if (bytes < 0) return "?";
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000.0 && u < 4) {
    v /= 1000.0;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  if (v < 10.0) return fmt::format("{:.2f} {}", v, units[u]);
  if (v < 100.0) return fmt::format("{:.1f} {}", v, units[u]);
  return fmt::format("{:.0f} {}", v, units[u]);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{} h {:02} min", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{} min {:02} s", s / 60, s % 60);
  return fmt::format("{} s", s);
}

}  // namespace cypris
