// Server-sent events framing (the server side) and a small incremental parser (the client side,
// used by `cypris bench serving` and the tests).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cypris::server {

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// "data: <payload>\n\n"; a payload with newlines becomes several data: lines, as the SSE spec wants.
std::string sse_data(std::string_view payload);
// "event: <event>\ndata: <payload>\n\n" (KoboldCpp's streaming format uses event: message).
std::string sse_event(std::string_view event, std::string_view payload);

struct SseEvent {
  std::string event;  // empty when the event had no event: line
  std::string data;   // the data: lines joined with '\n'
};

// Feed bytes as they arrive; complete events come out. Comments (":...") are skipped; CRLF and LF
// line ends are both accepted.
class SseParser {
 public:
  std::vector<SseEvent> feed(std::string_view bytes);

 private:
  void line(std::string_view l, std::vector<SseEvent>& out);
  std::string buf_;
  SseEvent cur_;
  bool has_data_ = false;
};

}  // namespace cypris::server
