// LogBuffer and its spdlog sink; see log_buffer.h.
#include "app/ui/state/log_buffer.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>

namespace cypris {

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::Trace:
      return "trace";
    case LogLevel::Debug:
      return "debug";
    case LogLevel::Info:
      return "info";
    case LogLevel::Warn:
      return "warning";
    case LogLevel::Error:
      return "error";
    case LogLevel::Critical:
      return "critical";
  }
  return "?";
}

LogBuffer::LogBuffer(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

void LogBuffer::push(LogLevel level, std::string time, std::string text) {
  std::lock_guard<std::mutex> lock(mu_);
  lines_.push_back(LogLine{++seq_, level, std::move(time), std::move(text)});
  while (lines_.size() > capacity_) lines_.pop_front();
}

std::vector<LogLine> LogBuffer::lines(LogLevel min_level, size_t limit) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LogLine> out;
  for (auto it = lines_.rbegin(); it != lines_.rend() && out.size() < limit; ++it) {
    if (static_cast<int>(it->level) >= static_cast<int>(min_level)) out.push_back(*it);
  }
  return {out.rbegin(), out.rend()};
}

size_t LogBuffer::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lines_.size();
}

uint64_t LogBuffer::total_pushed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq_;
}

void LogBuffer::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  lines_.clear();
}

void LogBufferSink::sink_it_(const spdlog::details::log_msg& msg) {
  int lvl = static_cast<int>(msg.level);
  if (lvl < 0) lvl = 0;
  if (lvl > static_cast<int>(LogLevel::Critical)) return;  // level "off"
  auto t = std::chrono::system_clock::to_time_t(msg.time);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  std::string time = fmt::format("{:02}:{:02}:{:02}.{:03}", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  buffer_->push(static_cast<LogLevel>(lvl), std::move(time), std::string(msg.payload.data(), msg.payload.size()));
}

}  // namespace cypris
