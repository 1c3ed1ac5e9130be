#include "app/server/openai/tool_parsers.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace cypris::server {

namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// JSON's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
bool valid_number(const std::string& s) {
  size_t i = 0, n = s.size();
  if (i < n && s[i] == '-') ++i;
  if (i >= n) return false;
  if (s[i] == '0') {
    ++i;
  } else if (is_digit(s[i])) {
    while (i < n && is_digit(s[i])) ++i;
  } else {
    return false;
  }
  if (i < n && s[i] == '.') {
    ++i;
    if (i >= n || !is_digit(s[i])) return false;
    while (i < n && is_digit(s[i])) ++i;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    if (i >= n || !is_digit(s[i])) return false;
    while (i < n && is_digit(s[i])) ++i;
  }
  return i == n;
}

constexpr const char* kHermesStart = "<tool_call>";
constexpr const char* kHermesEnd = "</tool_call>";
constexpr const char* kMistralStart = "[TOOL_CALLS]";
constexpr const char* kPythonTag = "<|python_tag|>";
constexpr size_t kMaxDepth = 256;

bool is_prefix_of(const std::string& s, std::string_view of) {
  return s.size() <= of.size() && of.compare(0, s.size(), s) == 0;
}

}  // namespace

// Reads one JSON value a byte at a time and says when it has ended; strict JSON (RFC 8259), with
// the nesting bounded.
class JsonValueScanner {
 public:
  enum class Result { More, Done, DoneBefore, Error };  // DoneBefore: a number ended before this byte

  Result feed(char c) {
    switch (s_) {
      case S::Start:
      case S::Value:
        if (is_ws(c)) return Result::More;
        return start_value(c);
      case S::Str:
        if (c == '"') {
          if (key_) {
            key_ = false;
            s_ = S::Colon;
            return Result::More;
          }
          return value_done();
        }
        if (c == '\\')
          s_ = S::StrEsc;
        else if (static_cast<unsigned char>(c) < 0x20)
          return Result::Error;
        return Result::More;
      case S::StrEsc:
        if (c == 'u') {
          s_ = S::StrHex;
          hex_ = 4;
          return Result::More;
        }
        if (std::string_view("\"\\/bfnrt").find(c) == std::string_view::npos) return Result::Error;
        s_ = S::Str;
        return Result::More;
      case S::StrHex:
        if (!std::isxdigit(static_cast<unsigned char>(c))) return Result::Error;
        if (--hex_ == 0) s_ = S::Str;
        return Result::More;
      case S::Num:
        if (is_digit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
          num_ += c;
          return Result::More;
        }
        if (!valid_number(num_)) return Result::Error;
        if (value_done() == Result::Done) return Result::DoneBefore;
        return feed(c);
      case S::Lit:
        if (c != lit_.front()) return Result::Error;
        lit_.erase(0, 1);
        return lit_.empty() ? value_done() : Result::More;
      case S::ObjKeyOrEnd:
      case S::ObjKey:
        if (is_ws(c)) return Result::More;
        if (c == '"') {
          s_ = S::Str;
          key_ = true;
          return Result::More;
        }
        if (c == '}' && s_ == S::ObjKeyOrEnd) {
          stack_.pop_back();
          return value_done();
        }
        return Result::Error;
      case S::Colon:
        if (is_ws(c)) return Result::More;
        if (c != ':') return Result::Error;
        s_ = S::Value;
        return Result::More;
      case S::ObjNext:
      case S::ArrNext:
        if (is_ws(c)) return Result::More;
        if (c == ',') {
          s_ = s_ == S::ObjNext ? S::ObjKey : S::Value;
          return Result::More;
        }
        if (c == (s_ == S::ObjNext ? '}' : ']')) {
          stack_.pop_back();
          return value_done();
        }
        return Result::Error;
      case S::ArrValOrEnd:
        if (is_ws(c)) return Result::More;
        if (c == ']') {
          stack_.pop_back();
          return value_done();
        }
        return start_value(c);
      case S::Ended:
        return Result::Error;
    }
    return Result::Error;
  }

 private:
  enum class S {
    Start,
    Value,
    Str,
    StrEsc,
    StrHex,
    Num,
    Lit,
    ObjKeyOrEnd,
    ObjKey,
    Colon,
    ObjNext,
    ArrValOrEnd,
    ArrNext,
    Ended
  };

  Result start_value(char c) {
    switch (c) {
      case '{':
      case '[':
        if (stack_.size() >= kMaxDepth) return Result::Error;
        stack_.push_back(c);
        s_ = c == '{' ? S::ObjKeyOrEnd : S::ArrValOrEnd;
        return Result::More;
      case '"':
        s_ = S::Str;
        key_ = false;
        return Result::More;
      case 't':
        lit_ = "rue";
        s_ = S::Lit;
        return Result::More;
      case 'f':
        lit_ = "alse";
        s_ = S::Lit;
        return Result::More;
      case 'n':
        lit_ = "ull";
        s_ = S::Lit;
        return Result::More;
      default:
        if (c == '-' || is_digit(c)) {
          num_.assign(1, c);
          s_ = S::Num;
          return Result::More;
        }
        return Result::Error;
    }
  }
  // A value ended with this byte (a number: before it).
  Result value_done() {
    if (stack_.empty()) {
      s_ = S::Ended;
      return Result::Done;
    }
    s_ = stack_.back() == '{' ? S::ObjNext : S::ArrNext;
    return Result::More;
  }

  S s_ = S::Start;
  std::vector<char> stack_;
  bool key_ = false;
  int hex_ = 0;
  std::string num_, lit_;
};

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::Hermes;
  if (name == "llama3_json") return ToolCallFormat::Llama3Json;
  if (name == "mistral") return ToolCallFormat::Mistral;
  return std::nullopt;
}

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes:
      return "hermes";
    case ToolCallFormat::Llama3Json:
      return "llama3_json";
    case ToolCallFormat::Mistral:
      return "mistral";
    case ToolCallFormat::Required:
      return "required";
    case ToolCallFormat::Named:
      return "named";
  }
  return "?";
}

std::optional<ToolCallFormat> detect_tool_call_format(std::string_view t) {
  if (t.find(kHermesStart) != std::string_view::npos) return ToolCallFormat::Hermes;
  if (t.find(kMistralStart) != std::string_view::npos) return ToolCallFormat::Mistral;
  if (t.find(kPythonTag) != std::string_view::npos || t.find("ipython") != std::string_view::npos) {
    return ToolCallFormat::Llama3Json;
  }
  return std::nullopt;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, bool streaming, std::string named_function)
    : format_(format), streaming_(streaming), named_(std::move(named_function)) {
  if (format_ == ToolCallFormat::Hermes) marker_ = kHermesStart;
  if (format_ == ToolCallFormat::Mistral) marker_ = kMistralStart;
  state_ = marker_.empty() ? State::Start : State::Text;
}
ToolCallParser::~ToolCallParser() = default;
ToolCallParser::ToolCallParser(ToolCallParser&&) noexcept = default;

std::vector<ToolStreamEvent> ToolCallParser::feed(std::string_view text) {
  for (char c : text) process(c);
  return std::exchange(out_, {});
}

std::vector<ToolStreamEvent> ToolCallParser::finish(bool truncated) {
  switch (state_) {
    case State::Start:
      if (format_ == ToolCallFormat::Named) {
        ws_.clear();  // leading spaces of the arguments
        call_named(named_);
      }
      break;
    case State::Region: {
      const bool complete = step_ == RegionStep::AfterObject || step_ == RegionStep::ArrayAfter;
      if (complete || region_confirmed_) {
        close_region();  // a call whose end marker never came (the model stopped) still counts
      } else if (truncated && (region_done_calls_ > 0 || done_calls_ > 0)) {
        // Cut by max_tokens after complete calls: those calls stand, the unfinished one is dropped.
        const int keep_below = region_first_index_ + region_done_calls_;
        std::erase_if(region_pending_, [&](const ToolStreamEvent& e) {
          return e.kind != ToolStreamEvent::Kind::Content && e.index >= keep_below;
        });
        next_index_ = keep_below;
        close_region();
      } else {
        region_error('\0', false);
      }
      break;
    }
    case State::NamedArgs:
      named_ws_.clear();
      break;
    case State::Text:
    case State::Llama3After:
      break;
  }
  const std::string held = std::exchange(held_, {});
  for (char c : held) content_char(c);
  if (!ws_.empty()) emit_out(ToolStreamEvent::Kind::Content, 0, std::exchange(ws_, {}));
  state_ = State::Text;
  return std::exchange(out_, {});
}

void ToolCallParser::process(char c) {
  switch (state_) {
    case State::Start: {
      if (is_ws(c) && held_.empty()) {
        ws_ += c;
        return;
      }
      if (format_ == ToolCallFormat::Named) {
        ws_.clear();
        state_ = State::NamedArgs;
        call_named(named_);
        process(c);
        return;
      }
      if (format_ == ToolCallFormat::Llama3Json) {
        const std::string cand = held_ + c;
        if (is_prefix_of(cand, kPythonTag)) {
          held_ = cand;
          if (held_ == kPythonTag) start_region(std::exchange(held_, {}));
          return;
        }
        if (held_.empty() && c == '{') {
          start_region("");
          region_byte(c);
          return;
        }
        held_.clear();
        state_ = State::Text;
        for (char h : cand) process(h);
        return;
      }
      // Required
      if (c == '[') {
        start_region("");
        region_byte(c);
        return;
      }
      state_ = State::Text;
      process(c);
      return;
    }
    case State::Text:
      process_text(c);
      return;
    case State::Region:
      region_byte(c);
      return;
    case State::Llama3After:
      if (held_.empty()) {
        if (is_ws(c)) {
          content_char(c);  // dropped: right after a call
        } else if (c == ';') {
          held_ = ";";
        } else {
          state_ = State::Text;
          process(c);
        }
        return;
      }
      if (is_ws(c)) {
        held_ += c;
      } else if (c == '{') {
        start_region(std::exchange(held_, {}));
        region_byte(c);
      } else {
        state_ = State::Text;
        const std::string rest = std::exchange(held_, {}) + c;
        for (char h : rest) process(h);
      }
      return;
    case State::NamedArgs:
      if (is_ws(c)) {
        named_ws_ += c;  // trailing spaces are not part of the arguments
      } else {
        named_ws_ += c;
        call_args(std::exchange(named_ws_, {}));
      }
      return;
  }
}

void ToolCallParser::process_text(char c) {
  if (!marker_.empty()) {
    const std::string cand = held_ + c;
    if (is_prefix_of(cand, marker_)) {
      if (cand.size() == marker_.size()) {
        held_.clear();
        start_region(cand);
      } else {
        held_ = cand;
      }
      return;
    }
    if (!held_.empty()) {
      // Not the marker after all: its first byte is content, the rest may still start one.
      held_.clear();
      content_char(cand[0]);
      for (size_t i = 1; i < cand.size(); ++i) process(cand[i]);
      return;
    }
  }
  content_char(c);
}

void ToolCallParser::content_char(char c) {
  if (is_ws(c)) {
    if (!after_call_) ws_ += c;
    return;
  }
  after_call_ = false;
  std::string s = std::exchange(ws_, {});
  s += c;
  emit_out(ToolStreamEvent::Kind::Content, 0, s);
}

void ToolCallParser::start_region(const std::string& marker_text) {
  state_ = State::Region;
  step_ = RegionStep::BeforeValue;
  region_is_array_ = false;
  array_comma_ = false;
  region_confirmed_ = false;
  region_raw_ = marker_text;
  region_ws_ = std::exchange(ws_, {});
  region_pending_.clear();
  region_first_index_ = next_index_;
  region_done_calls_ = 0;
  end_marker_held_.clear();
}

void ToolCallParser::begin_object() {
  obj_ = ObjStep::KeyOrEnd;
  call_has_name_ = call_has_args_ = in_args_ = args_is_string_ = false;
  call_index_ = -1;
  call_args_buf_.clear();
  scanner_.reset();
  key_.clear();
}

void ToolCallParser::region_byte(char c) {
  region_raw_ += c;
  switch (step_) {
    case RegionStep::BeforeValue:
      if (is_ws(c)) return;
      if (c == '{') {
        begin_object();
        step_ = RegionStep::InObject;
        return;
      }
      if (c == '[' && (format_ == ToolCallFormat::Mistral || format_ == ToolCallFormat::Required)) {
        region_is_array_ = true;
        array_comma_ = false;
        step_ = RegionStep::ArrayBefore;
        return;
      }
      region_error(c, true);
      return;
    case RegionStep::InObject: {
      const ObjResult r = object_byte(c);
      if (r == ObjResult::Error) {
        region_error(c, true);
        return;
      }
      if (r == ObjResult::More) return;
      if (!end_object()) {
        region_error(c, false);  // a JSON object, but not a call: content, this byte included
        return;
      }
      ++region_done_calls_;
      ++done_calls_;
      if (region_is_array_) {
        step_ = RegionStep::ArrayAfter;
      } else if (format_ == ToolCallFormat::Hermes) {
        step_ = RegionStep::AfterObject;
      } else {
        close_region();
        if (format_ == ToolCallFormat::Llama3Json) state_ = State::Llama3After;
      }
      return;
    }
    case RegionStep::ArrayBefore:
      if (is_ws(c)) return;
      if (c == '{') {
        begin_object();
        step_ = RegionStep::InObject;
        return;
      }
      // An empty array calls nothing: it stays content, like any region without a call.
      region_error(c, !(c == ']' && !array_comma_));
      return;
    case RegionStep::ArrayAfter:
      if (is_ws(c)) return;
      if (c == ',') {
        array_comma_ = true;
        step_ = RegionStep::ArrayBefore;
        return;
      }
      if (c == ']') {
        close_region();
        return;
      }
      region_error(c, true);
      return;
    case RegionStep::AfterObject: {
      const std::string cand = end_marker_held_ + c;
      if (is_prefix_of(cand, kHermesEnd)) {
        end_marker_held_ = cand;
        if (cand == kHermesEnd) close_region();
        return;
      }
      if (end_marker_held_.empty() && is_ws(c)) return;
      region_error(c, true);
      return;
    }
  }
}

ToolCallParser::ObjResult ToolCallParser::object_byte(char c) {
  switch (obj_) {
    case ObjStep::KeyOrEnd:
    case ObjStep::KeyAfterComma:
      if (is_ws(c)) return ObjResult::More;
      if (c == '"') {
        scanner_ = std::make_unique<JsonValueScanner>();
        scanner_->feed(c);
        value_raw_.assign(1, c);
        obj_ = ObjStep::Key;
        return ObjResult::More;
      }
      if (c == '}' && obj_ == ObjStep::KeyOrEnd) return ObjResult::Done;
      return ObjResult::Error;
    case ObjStep::Key: {
      value_raw_ += c;
      const auto r = scanner_->feed(c);
      if (r == JsonValueScanner::Result::Error) return ObjResult::Error;
      if (r == JsonValueScanner::Result::Done) {
        key_ = nlohmann::json::parse(value_raw_).get<std::string>();
        obj_ = ObjStep::Colon;
      }
      return ObjResult::More;
    }
    case ObjStep::Colon:
      if (is_ws(c)) return ObjResult::More;
      if (c != ':') return ObjResult::Error;
      obj_ = ObjStep::ValueStart;
      return ObjResult::More;
    case ObjStep::ValueStart:
      if (is_ws(c)) return ObjResult::More;
      scanner_ = std::make_unique<JsonValueScanner>();
      value_raw_.clear();
      in_args_ = (key_ == "arguments" || key_ == "parameters") && !call_has_args_;
      if (in_args_) {
        call_has_args_ = true;
        args_is_string_ = c == '"';
      }
      obj_ = ObjStep::Value;
      return object_byte(c);
    case ObjStep::Value: {
      const auto r = scanner_->feed(c);
      if (r == JsonValueScanner::Result::Error) return ObjResult::Error;
      if (r == JsonValueScanner::Result::DoneBefore) {
        if (!finish_value()) return ObjResult::Error;
        obj_ = ObjStep::CommaOrEnd;
        return object_byte(c);
      }
      value_raw_ += c;
      if (in_args_ && !args_is_string_) call_args(std::string_view(&c, 1));
      if (r == JsonValueScanner::Result::Done) {
        if (!finish_value()) return ObjResult::Error;
        obj_ = ObjStep::CommaOrEnd;
      }
      return ObjResult::More;
    }
    case ObjStep::CommaOrEnd:
      if (is_ws(c)) return ObjResult::More;
      if (c == ',') {
        obj_ = ObjStep::KeyAfterComma;
        return ObjResult::More;
      }
      if (c == '}') return ObjResult::Done;
      return ObjResult::Error;
  }
  return ObjResult::Error;
}

bool ToolCallParser::finish_value() {
  if (key_ == "name" && !call_has_name_) {
    const auto v = nlohmann::json::parse(value_raw_, nullptr, false);
    if (!v.is_string() || v.get_ref<const std::string&>().empty()) return false;
    call_has_name_ = true;
    call_named(v.get<std::string>());
  }
  if (in_args_ && args_is_string_) {
    // Arguments written as a JSON string holding the JSON: the text inside.
    call_args(nlohmann::json::parse(value_raw_).get<std::string>());
  }
  in_args_ = false;
  return true;
}

bool ToolCallParser::end_object() {
  if (!call_has_name_) return false;
  if (!call_has_args_) call_args("{}");
  call_index_ = -1;
  return true;
}

void ToolCallParser::region_error(char c, bool reprocess) {
  if (reprocess) region_raw_.pop_back();
  if (region_confirmed_) {
    // Streaming: the calls already announced cannot be taken back; the region ends here.
    region_pending_.clear();
    state_ = State::Text;
    after_call_ = true;
    call_index_ = -1;
  } else {
    next_index_ = region_first_index_;
    region_pending_.clear();
    call_index_ = -1;
    state_ = State::Text;
    const std::string text = std::exchange(region_ws_, {}) + std::exchange(region_raw_, {});
    for (char t : text) content_char(t);
  }
  if (reprocess) process(c);
}

void ToolCallParser::close_region() {
  if (!region_confirmed_) {
    for (auto& e : region_pending_) emit_out(e.kind, e.index, e.text);
  }
  region_pending_.clear();
  region_ws_.clear();
  region_raw_.clear();
  region_confirmed_ = false;
  call_index_ = -1;
  state_ = State::Text;
  after_call_ = true;
}

void ToolCallParser::emit(ToolStreamEvent::Kind kind, int index, std::string_view text) {
  if (state_ == State::Region && !region_confirmed_) {
    auto& v = region_pending_;
    if (kind != ToolStreamEvent::Kind::CallBegin && !v.empty() && v.back().kind == kind && v.back().index == index) {
      v.back().text += text;
    } else {
      v.push_back({kind, index, std::string(text)});
    }
    return;
  }
  emit_out(kind, index, text);
}

void ToolCallParser::emit_out(ToolStreamEvent::Kind kind, int index, std::string_view text) {
  if (kind != ToolStreamEvent::Kind::CallBegin && !out_.empty() && out_.back().kind == kind &&
      out_.back().index == index) {
    out_.back().text += text;
  } else {
    out_.push_back({kind, index, std::string(text)});
  }
}

void ToolCallParser::call_named(std::string name) {
  call_index_ = next_index_++;
  if (streaming_ && state_ == State::Region && !region_confirmed_) {
    // The first name read in the region: from here its calls stream.
    for (auto& e : region_pending_) emit_out(e.kind, e.index, e.text);
    region_pending_.clear();
    region_ws_.clear();
    region_confirmed_ = true;
  }
  emit(ToolStreamEvent::Kind::CallBegin, call_index_, name);
  if (!call_args_buf_.empty()) emit(ToolStreamEvent::Kind::Arguments, call_index_, std::exchange(call_args_buf_, {}));
}

void ToolCallParser::call_args(std::string_view piece) {
  if (call_index_ < 0) {
    call_args_buf_ += piece;
    return;
  }
  emit(ToolStreamEvent::Kind::Arguments, call_index_, piece);
}

ParsedToolOutput collect_tool_events(const std::vector<ToolStreamEvent>& events) {
  ParsedToolOutput p;
  std::string content;
  for (const auto& e : events) {
    if (e.kind == ToolStreamEvent::Kind::Content) {
      content += e.text;
      continue;
    }
    if (e.index < 0) continue;
    if (static_cast<size_t>(e.index) >= p.calls.size()) p.calls.resize(static_cast<size_t>(e.index) + 1);
    if (e.kind == ToolStreamEvent::Kind::CallBegin) {
      p.calls[static_cast<size_t>(e.index)].name = e.text;
    } else {
      p.calls[static_cast<size_t>(e.index)].arguments += e.text;
    }
  }
  if (!content.empty()) p.content = std::move(content);
  return p;
}

ParsedToolOutput parse_tool_calls(ToolCallFormat format, std::string_view text, const std::string& named_function,
                                  bool truncated) {
  ToolCallParser parser(format, false, named_function);
  std::vector<ToolStreamEvent> events = parser.feed(text);
  for (auto& e : parser.finish(truncated)) events.push_back(std::move(e));
  return collect_tool_events(events);
}

}  // namespace cypris::server
