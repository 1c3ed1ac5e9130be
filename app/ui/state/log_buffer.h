// The Logs panel's model: a bounded ring buffer of log lines fed by a spdlog sink (attach it with
// add_log_sink), with a minimum-level filter. Keeps the newest `capacity` lines; older ones drop.
#pragma once

#include <spdlog/sinks/base_sink.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cypris {

// Same order as spdlog::level::level_enum (trace=0 ... critical=5).
enum class LogLevel { Trace = 0, Debug, Info, Warn, Error, Critical };

const char* log_level_name(LogLevel level);

struct LogLine {
  uint64_t seq = 0;  // 1, 2, 3, ... over the buffer's lifetime (gaps show dropped lines)
  LogLevel level = LogLevel::Info;
  std::string time;  // "12:34:56.789"
  std::string text;  // the message, without the level and time
};

class LogBuffer {
 public:
  explicit LogBuffer(size_t capacity = 5000);

  void push(LogLevel level, std::string time, std::string text);  // any thread
  // The kept lines at or above min_level, oldest first, at most `limit` of the newest.
  std::vector<LogLine> lines(LogLevel min_level, size_t limit = SIZE_MAX) const;
  size_t size() const;
  uint64_t total_pushed() const;  // changes whenever a line arrives: the panel redraws on change
  void clear();

 private:
  size_t capacity_;
  mutable std::mutex mu_;
  std::deque<LogLine> lines_;
  uint64_t seq_ = 0;
};

// spdlog sink writing into a LogBuffer.
class LogBufferSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit LogBufferSink(std::shared_ptr<LogBuffer> buffer) : buffer_(std::move(buffer)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override {}

 private:
  std::shared_ptr<LogBuffer> buffer_;
};

}  // namespace cypris
