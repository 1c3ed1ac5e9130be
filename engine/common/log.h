// Logging through spdlog. One named logger ("cypris"); the UI's log panel and the tests attach
// extra sinks with add_log_sink().
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace cypris {

// Creates the logger on first use; safe to call from any thread.
spdlog::logger& logger();

// level: trace, debug, info, warning (or warn), error, critical, off. Throws Error otherwise.
void set_log_level(const std::string& level);

void add_log_sink(std::shared_ptr<spdlog::sinks::sink> sink);
void remove_log_sink(const std::shared_ptr<spdlog::sinks::sink>& sink);

// Cuts text for request logging to --max-log-len characters (0 or negative: unlimited).
std::string clip_for_log(const std::string& text, long max_len);

}  // namespace cypris

#define LOG_TRACE(...) ::cypris::logger().trace(__VA_ARGS__)
#define LOG_DEBUG(...) ::cypris::logger().debug(__VA_ARGS__)
#define LOG_INFO(...) ::cypris::logger().info(__VA_ARGS__)
#define LOG_WARN(...) ::cypris::logger().warn(__VA_ARGS__)
#define LOG_ERROR(...) ::cypris::logger().error(__VA_ARGS__)
