// The chat's structured-output field; see structured_output.h.
#include "app/ui/state/structured_output.h"

#include "app/server/openai/sampling_from_json.h"
#include "engine/common/error.h"

namespace cypris {

using nlohmann::json;

const std::vector<StructuredMode>& structured_modes() {
  static const std::vector<StructuredMode> modes = {StructuredMode::Off, StructuredMode::JsonSchema,
                                                    StructuredMode::Regex, StructuredMode::Choice,
                                                    StructuredMode::Gbnf};
  return modes;
}

const char* structured_mode_label(StructuredMode m) {
  switch (m) {
    case StructuredMode::Off:
      return "Off";
    case StructuredMode::JsonSchema:
      return "JSON schema";
    case StructuredMode::Regex:
      return "Regex";
    case StructuredMode::Choice:
      return "Choice (one per line)";
    case StructuredMode::Gbnf:
      return "GBNF grammar";
  }
  return "?";
}

const char* structured_mode_key(StructuredMode m) {
  switch (m) {
    case StructuredMode::Off:
      return "off";
    case StructuredMode::JsonSchema:
      return "json_schema";
    case StructuredMode::Regex:
      return "regex";
    case StructuredMode::Choice:
      return "choice";
    case StructuredMode::Gbnf:
      return "gbnf";
  }
  return "?";
}

std::optional<StructuredMode> parse_structured_mode(const std::string& key) {
  for (StructuredMode m : structured_modes()) {
    if (key == structured_mode_key(m)) return m;
  }
  return std::nullopt;
}

json StructuredOutput::to_json() const {
  return json{{"mode", structured_mode_key(mode)}, {"text", text}};
}

StructuredOutput StructuredOutput::from_json(const json& j, const std::string& where) {
  CYPRIS_CHECK(j.is_object(), "{}: \"structured_output\" must be an object with \"mode\" and \"text\"", where);
  StructuredOutput f;
  if (auto it = j.find("mode"); it != j.end()) {
    CYPRIS_CHECK(it->is_string(), "{}: structured_output.mode must be a string", where);
    auto m = parse_structured_mode(it->get<std::string>());
    CYPRIS_CHECK(m, "{}: structured_output.mode '{}' is not one of off, json_schema, regex, choice, gbnf", where,
                 it->get<std::string>());
    f.mode = *m;
  }
  if (auto it = j.find("text"); it != j.end()) {
    CYPRIS_CHECK(it->is_string(), "{}: structured_output.text must be a string", where);
    f.text = it->get<std::string>();
  }
  return f;
}

namespace {

bool blank(const std::string& s) {
  return s.find_first_not_of(" \t\r\n") == std::string::npos;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t nl = text.find('\n', start);
    std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();  // pasted Windows text
    if (!line.empty()) out.push_back(std::move(line));          // a choice keeps its spaces: they are output
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out;
}

}  // namespace

json structured_request_fields(const StructuredOutput& f) {
  // A regex of spaces is a real pattern; for the other modes blank text means "nothing typed yet".
  if (f.mode == StructuredMode::Off || f.text.empty() || (f.mode != StructuredMode::Regex && blank(f.text))) {
    return json::object();
  }
  switch (f.mode) {
    case StructuredMode::JsonSchema:
      return json{{"guided_json", f.text}};
    case StructuredMode::Regex:
      return json{{"guided_regex", f.text}};
    case StructuredMode::Choice:
      return json{{"guided_choice", lines_of(f.text)}};
    case StructuredMode::Gbnf:
      return json{{"grammar", f.text}};
    case StructuredMode::Off:
      break;
  }
  return json::object();
}

StructuredCheck check_structured_output(const StructuredOutput& f) {
  StructuredCheck c;
  if (f.mode == StructuredMode::Off) return c;
  json fields = structured_request_fields(f);
  if (fields.empty()) {
    c.state = StructuredCheck::State::Empty;
    c.message = "empty: nothing is enforced";
    return c;
  }
  try {
    // The OpenAI routes' reader: the same checks, the same compiler, the same messages.
    if (!server::guided_from_json(fields).active()) {
      c.state = StructuredCheck::State::Empty;
      c.message = "empty: nothing is enforced";
      return c;
    }
  } catch (const std::exception& e) {
    c.state = StructuredCheck::State::Invalid;
    c.message = e.what();
    return c;
  }
  c.state = StructuredCheck::State::Valid;
  c.message = "valid";
  c.fields = std::move(fields);
  return c;
}

void StructuredOutputValidator::poll(const StructuredOutput& f, double now_s) {
  if (!pending(f)) return;
  if (!seen_ || !(*seen_ == f)) {
    seen_ = f;
    changed_at_ = now_s;
    // Switching to Off needs no compile: show it at once.
    if (f.mode != StructuredMode::Off) return;
  }
  if (f.mode == StructuredMode::Off || now_s - changed_at_ >= debounce_s_) validate(f);
}

const StructuredCheck& StructuredOutputValidator::validate(const StructuredOutput& f) {
  if (!pending(f)) return result_;
  result_ = check_structured_output(f);
  if (f.mode != StructuredMode::Off) ++compiles_;
  checked_ = f;
  return result_;
}

}  // namespace cypris
