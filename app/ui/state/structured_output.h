// The chat's "Structured output" field (Samplers panel): a mode (off, JSON schema, regex, choices one
// per line, GBNF grammar) and its text; the request fields it adds to the chat request, spelled as an
// OpenAI request spells them (guided_json / guided_regex / guided_choice / grammar) so that the app
// and the server read them with the same code (server::guided_from_json, which also compiles the
// grammar); and the validator the panel polls every frame, which compiles only when the field has
// changed and then been left alone for a moment.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace cypris {

enum class StructuredMode { Off, JsonSchema, Regex, Choice, Gbnf };

const std::vector<StructuredMode>& structured_modes();  // in the order the selector shows them
const char* structured_mode_label(StructuredMode m);    // "JSON schema"
const char* structured_mode_key(StructuredMode m);      // "json_schema" (presets)
std::optional<StructuredMode> parse_structured_mode(const std::string& key);

struct StructuredOutput {
  StructuredMode mode = StructuredMode::Off;
  std::string text;
  bool operator==(const StructuredOutput&) const = default;

  // Presets: {"mode": "regex", "text": "..."}. from_json throws cypris::Error naming `where`.
  nlohmann::json to_json() const;
  static StructuredOutput from_json(const nlohmann::json& j, const std::string& where);
};

// The OpenAI request fields for the field's text: {"guided_json": text}, {"guided_regex": text},
// {"guided_choice": [non-empty lines]}, {"grammar": text}; an empty object when the mode is off or
// the text is blank.
nlohmann::json structured_request_fields(const StructuredOutput& f);

struct StructuredCheck {
  enum class State { Off, Empty, Valid, Invalid };
  State state = State::Off;
  std::string message;                               // "valid", or the compiler's error with its position
  nlohmann::json fields = nlohmann::json::object();  // the request fields when Valid
};

// Compiles the field now with the server's guided-decoding front end (cached by text).
StructuredCheck check_structured_output(const StructuredOutput& f);

class StructuredOutputValidator {
 public:
  explicit StructuredOutputValidator(double debounce_s = 0.3) : debounce_s_(debounce_s) {}

  // Every frame: notes a change, and compiles once the field has not changed for debounce_s.
  void poll(const StructuredOutput& f, double now_s);
  // Compiles now unless the last result is for `f` (the Send button).
  const StructuredCheck& validate(const StructuredOutput& f);
  // The field differs from what result() was computed for.
  bool pending(const StructuredOutput& f) const { return !checked_ || !(*checked_ == f); }
  const StructuredCheck& result() const { return result_; }
  int compiles() const { return compiles_; }  // how many times it compiled (tests)

 private:
  double debounce_s_;
  std::optional<StructuredOutput> checked_;  // what result_ is for
  std::optional<StructuredOutput> seen_;     // the field as last polled
  double changed_at_ = 0.0;
  StructuredCheck result_;
  int compiles_ = 0;
};

}  // namespace cypris
