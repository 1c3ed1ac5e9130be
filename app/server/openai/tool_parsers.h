// Tool-call parsers for /v1/chat/completions: turn a model's output text into OpenAI tool_calls,
// for the formats vLLM's --tool-call-parser names (hermes, llama3_json, mistral) and for the output
// of tool_choice "required" (a JSON array of {name, parameters}) and of a named tool_choice (the
// arguments object itself).
//
// One byte-at-a-time state machine serves both uses, so a streamed parse and a complete parse of
// the same text agree: feeding the text in any pieces gives the same events.
//  - Streaming (ToolCallParser(format, true)): a call is announced (CallBegin) as soon as its
//    "name" is read, and its arguments follow in pieces as the model writes them. Text that might
//    be the start of a marker (`<tool_call>`, `[TOOL_CALLS]`, `<|python_tag|>`) or whitespace next
//    to a call is held back until it is decided.
//  - Complete (parse_tool_calls): a call region counts only when all of its JSON is valid; one that
//    is not stays content (vLLM's non-streaming parsers do the same).
// The two differ only for output that goes wrong after a call's name was streamed: that call cannot
// be taken back, so the stream keeps it (with the arguments sent so far).
//
// Arguments are the model's own JSON text of the arguments value (an arguments value written as a
// JSON string is decoded to its text). Whitespace directly before or after a call is dropped from
// the content; other text outside the calls is content, verbatim.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cypris::server {

enum class ToolCallFormat {
  Hermes,      // <tool_call>{"name": ..., "arguments": {...}}</tool_call>, several; text around them
  Llama3Json,  // the output starts with a JSON object {"name", "parameters"|"arguments"} (after an
               // optional <|python_tag|>); several may follow separated by ';'
  Mistral,     // [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
  Required,    // tool_choice "required": [{"name": ..., "parameters": {...}}, ...] from the start
  Named,       // a named tool_choice: the whole output is that function's arguments
};

// The --tool-call-parser values (hermes, llama3_json, mistral); nullopt for anything else.
std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name);
const char* tool_call_format_name(ToolCallFormat f);
// The parser a chat template's text implies: `<tool_call>` -> hermes, `[TOOL_CALLS]` -> mistral,
// `<|python_tag|>` or `ipython` -> llama3_json; nullopt when it shows none of them.
std::optional<ToolCallFormat> detect_tool_call_format(std::string_view chat_template);

struct ToolStreamEvent {
  enum class Kind { Content, CallBegin, Arguments };
  Kind kind = Kind::Content;
  int index = 0;     // the call's index (CallBegin, Arguments)
  std::string text;  // the content piece, the function name (CallBegin) or an arguments piece
};

class JsonValueScanner;  // tool_parsers.cpp

class ToolCallParser {
 public:
  // named_function: the function's name for ToolCallFormat::Named.
  ToolCallParser(ToolCallFormat format, bool streaming, std::string named_function = "");
  ~ToolCallParser();
  ToolCallParser(ToolCallParser&&) noexcept;
  // What the new text decides (adjacent pieces of one kind merged).
  std::vector<ToolStreamEvent> feed(std::string_view text);
  // The end of the output: what was held back is decided. truncated: the output was cut short
  // (finish_reason "length"); a call region left open then keeps the calls it completed and drops
  // its unfinished tail (without a complete call anywhere it stays content, as before).
  std::vector<ToolStreamEvent> finish(bool truncated = false);
  // Calls announced so far.
  int calls() const { return next_index_; }

 private:
  enum class State {
    Start,        // llama3_json / required / named: before the first non-space byte
    Text,         // content; markers looked for when the format has one
    Region,       // inside a call region (see RegionStep)
    Llama3After,  // llama3_json after a call: ';' then '{' starts another
    NamedArgs,    // named: every byte is arguments
  };
  enum class RegionStep {
    BeforeValue,  // after the marker: spaces, then '{' (or '[' for mistral / required)
    InObject,     // inside a call object (CallObject)
    ArrayBefore,  // in the array, before an object (or ']')
    ArrayAfter,   // in the array, after an object: ',' or ']'
    AfterObject,  // hermes: after the object, spaces then </tool_call>
  };
  // The call object: {"name": "...", "arguments": <value>, ...}.
  enum class ObjStep { KeyOrEnd, Key, Colon, ValueStart, Value, CommaOrEnd, KeyAfterComma };

  enum class ObjResult { More, Done, Error };

  void process(char c);
  void process_text(char c);
  void content_char(char c);  // a byte of content: the whitespace rules, then out
  void start_region(const std::string& marker_text);
  void region_byte(char c);
  ObjResult object_byte(char c);
  void begin_object();
  bool finish_value();  // false: a "name" that is not a non-empty string
  bool end_object();    // false: the object is not a call (no name)
  // The region's JSON broke at byte c: revert it to content (or, once streamed, end it); reprocess:
  // c is not part of the region and is read again outside it.
  void region_error(char c, bool reprocess);
  void close_region();  // the region ended well
  void emit(ToolStreamEvent::Kind kind, int index, std::string_view text);
  void emit_out(ToolStreamEvent::Kind kind, int index, std::string_view text);
  void call_named(std::string name);
  void call_args(std::string_view piece);

  ToolCallFormat format_;
  bool streaming_;
  std::string named_;
  std::string marker_;  // the marker that opens a region in Text ("" = none)
  State state_;
  std::vector<ToolStreamEvent> out_;

  // Text
  std::string held_;         // a possible marker prefix
  std::string ws_;           // trailing whitespace of the content, not yet sent
  bool after_call_ = false;  // whitespace right after a call is dropped

  // Region
  RegionStep step_ = RegionStep::BeforeValue;
  bool region_is_array_ = false;
  bool array_comma_ = false;       // after a ',' in the array: an object must follow
  bool region_confirmed_ = false;  // its events go straight out (streaming: a name was read)
  std::string region_raw_;         // the region's text so far (for a revert)
  std::string region_ws_;          // the whitespace before the region
  std::vector<ToolStreamEvent> region_pending_;
  int region_first_index_ = 0;
  int region_done_calls_ = 0;  // calls of this region whose object closed
  int done_calls_ = 0;         // calls whose object closed, in the whole output
  std::string end_marker_held_;  // hermes: the part of </tool_call> seen

  // The call object being read
  ObjStep obj_ = ObjStep::KeyOrEnd;
  std::unique_ptr<JsonValueScanner> scanner_;  // the key or value being read
  std::string value_raw_;
  std::string key_;
  bool call_has_name_ = false, call_has_args_ = false, in_args_ = false, args_is_string_ = false;
  int call_index_ = -1;
  std::string call_args_buf_;  // arguments read before the name

  // Named
  std::string named_ws_;
  bool named_started_ = false;

  int next_index_ = 0;
};

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON text
};
struct ParsedToolOutput {
  std::optional<std::string> content;  // nullopt when there is none
  std::vector<ParsedToolCall> calls;
};

// Gathers events into content and calls (what a client rebuilds from the stream).
ParsedToolOutput collect_tool_events(const std::vector<ToolStreamEvent>& events);
// The complete parse of a whole output; truncated as for ToolCallParser::finish.
ParsedToolOutput parse_tool_calls(ToolCallFormat format, std::string_view text, const std::string& named_function = "",
                                  bool truncated = false);

}  // namespace cypris::server
