#include "app/server/sse.h"

namespace cypris::server {

static void append_data_lines(std::string& out, std::string_view payload) {
  size_t start = 0;
  while (true) {
    size_t nl = payload.find('\n', start);
    out += "data: ";
    out.append(payload.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start));
    out += '\n';
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out += '\n';
}

std::string sse_data(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  append_data_lines(out, payload);
  return out;
}

std::string sse_event(std::string_view event, std::string_view payload) {
  std::string out = "event: ";
  out.append(event);
  out += '\n';
  append_data_lines(out, payload);
  return out;
}

std::vector<SseEvent> SseParser::feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  buf_.append(bytes);
  size_t start = 0;
  while (true) {
    size_t nl = buf_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view l(buf_.data() + start, nl - start);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    line(l, out);
    start = nl + 1;
  }
  buf_.erase(0, start);
  return out;
}

void SseParser::line(std::string_view l, std::vector<SseEvent>& out) {
  if (l.empty()) {
    if (has_data_ || !cur_.event.empty()) out.push_back(std::move(cur_));
    cur_ = SseEvent{};
    has_data_ = false;
    return;
  }
  if (l.front() == ':') return;  // comment
  size_t colon = l.find(':');
  std::string_view field = l.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view{} : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) cur_.data += '\n';
    cur_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    cur_.event = std::string(value);
  }
}

}  // namespace cypris::server
