#include "engine/common/log.h"

#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "engine/common/error.h"

namespace cypris {
namespace {

struct LoggerHolder {
  std::shared_ptr<spdlog::sinks::dist_sink_mt> dist = std::make_shared<spdlog::sinks::dist_sink_mt>();
  std::shared_ptr<spdlog::logger> log;
  LoggerHolder() {
    dist->add_sink(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    log = std::make_shared<spdlog::logger>("cypris", dist);
    log->set_pattern("%^%L%$ %m-%d %H:%M:%S.%e %v");
    log->set_level(spdlog::level::info);
  }
};

LoggerHolder& holder() {
  static LoggerHolder h;
  return h;
}

}  // namespace

spdlog::logger& logger() { return *holder().log; }

void set_log_level(const std::string& level) {
  std::string l = level == "warn" ? "warning" : level;
  static const char* kNames[] = {"trace", "debug", "info", "warning", "error", "critical", "off"};
  for (int i = 0; i < 7; ++i) {
    if (l == kNames[i]) {
      logger().set_level(static_cast<spdlog::level::level_enum>(i));
      return;
    }
  }
  CYPRIS_FAIL("--log-level: '{}' is not a log level; allowed: trace, debug, info, warning, error, critical, off",
              level);
}

void add_log_sink(std::shared_ptr<spdlog::sinks::sink> sink) { holder().dist->add_sink(std::move(sink)); }

void remove_log_sink(const std::shared_ptr<spdlog::sinks::sink>& sink) { holder().dist->remove_sink(sink); }

std::string clip_for_log(const std::string& text, long max_len) {
  if (max_len <= 0 || text.size() <= static_cast<size_t>(max_len)) return text;
  // Cut at max_len characters (UTF-8 code points), never inside one.
  size_t i = 0;
  for (long chars = 0; i < text.size() && chars < max_len; ++chars) {
    ++i;
    while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
  }
  if (i >= text.size()) return text;
  return text.substr(0, i) + "...";
}

}  // namespace cypris
