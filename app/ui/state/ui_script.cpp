// The --ui-script parser; see ui_script.h.
#include "app/ui/state/ui_script.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "app/ui/state/structured_output.h"
#include "engine/common/error.h"

namespace cypris {

namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

double number_arg(const std::string& text, double def, const std::string& at) {
  if (text.empty()) return def;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  CYPRIS_CHECK(*end == '\0' && v >= 0, "{}: expected a number >= 0, got '{}'", at, text);
  return v;
}

std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == 'n') {
      out += '\n';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::vector<ScriptAction> parse_ui_script(const std::string& text, const std::string& where) {
  using K = ScriptAction::Kind;
  static const std::map<std::string, K> kinds = {{"open", K::Open},
                                                 {"close", K::Close},
                                                 {"set", K::Set},
                                                 {"options_view", K::OptionsView},
                                                 {"sampler", K::Sampler},
                                                 {"structured", K::Structured},
                                                 {"load", K::Load},
                                                 {"unload", K::Unload},
                                                 {"wait_loaded", K::WaitLoaded},
                                                 {"type", K::Type},
                                                 {"send", K::Send},
                                                 {"stop", K::Stop},
                                                 {"regenerate", K::Regenerate},
                                                 {"wait_reply", K::WaitReply},
                                                 {"expect_reply", K::ExpectReply},
                                                 {"server", K::Server},
                                                 {"frames", K::Frames},
                                                 {"screenshot", K::Screenshot},
                                                 {"quit", K::Quit},
                                                 {"hub_search", K::HubSearch},
                                                 {"hub_repo", K::HubRepo},
                                                 {"wait_input", K::WaitInput},
                                                 {"wait_chat_error", K::WaitChatError},
                                                 {"download", K::Download},
                                                 {"wait_download", K::WaitDownload}};
  static const char* kPanels[] = {"models", "options", "chat", "samplers", "server", "stats", "logs"};

  std::vector<ScriptAction> out;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    std::string line = raw;
    if (line.rfind("type ", 0) != 0 && line.rfind("wait_input ", 0) != 0) {  // '#' may be in a message
      size_t hash = line.find('#');
      if (hash != std::string::npos) line = line.substr(0, hash);
    }
    line = trim(line);
    if (line.empty()) continue;
    const std::string at = where + ":" + std::to_string(line_no);
    size_t sp = line.find_first_of(" \t");
    std::string word = line.substr(0, sp);
    std::string rest = sp == std::string::npos ? "" : trim(line.substr(sp + 1));
    auto it = kinds.find(word);
    CYPRIS_CHECK(it != kinds.end(), "{}: unknown action '{}'", at, word);
    ScriptAction a;
    a.kind = it->second;
    a.line = line_no;
    switch (a.kind) {
      case K::Open:
      case K::Close: {
        bool known = false;
        for (const char* p : kPanels) known = known || rest == p;
        CYPRIS_CHECK(known, "{}: '{}' needs a panel: models, options, chat, samplers, server, stats or logs", at, word);
        a.arg = rest;
        break;
      }
      case K::Set:
      case K::Sampler: {
        size_t s2 = rest.find_first_of(" \t");
        CYPRIS_CHECK(!rest.empty() && s2 != std::string::npos, "{}: '{}' needs a name and a value", at, word);
        a.arg = rest.substr(0, s2);
        a.value = trim(rest.substr(s2 + 1));
        break;
      }
      case K::Structured: {
        size_t s2 = rest.find_first_of(" \t");
        a.arg = rest.substr(0, s2);
        CYPRIS_CHECK(parse_structured_mode(a.arg), "{}: 'structured' takes off, json_schema, regex, choice or gbnf",
                     at);
        a.value = s2 == std::string::npos ? "" : unescape(trim(rest.substr(s2 + 1)));
        break;
      }
      case K::Type:
      case K::WaitInput:
      case K::WaitChatError:
        CYPRIS_CHECK(!rest.empty(), "{}: '{}' needs the text", at, word);
        a.arg = unescape(rest);
        a.number = 30;
        break;
      case K::OptionsView:
        CYPRIS_CHECK(rest == "quick" || rest == "advanced" || rest == "advanced_all",
                     "{}: 'options_view' takes quick, advanced or advanced_all", at);
        a.arg = rest;
        break;
      case K::Server:
        CYPRIS_CHECK(rest == "on" || rest == "off", "{}: 'server' takes on or off", at);
        a.arg = rest;
        break;
      case K::Screenshot:
      case K::HubSearch:
      case K::HubRepo:
        CYPRIS_CHECK(!rest.empty(), "{}: '{}' needs an argument", at, word);
        a.arg = rest;
        break;
      case K::WaitDownload:
        a.number = number_arg(rest, 600, at);
        break;
      case K::WaitLoaded:
      case K::WaitReply:
        a.number = number_arg(rest, 120, at);
        break;
      case K::Frames:
        a.number = number_arg(rest, 1, at);
        break;
      case K::Quit:
        a.number = number_arg(rest, 0, at);
        break;
      default:
        CYPRIS_CHECK(rest.empty(), "{}: '{}' takes no argument", at, word);
        break;
    }
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<ScriptAction> load_ui_script(const std::string& path) {
  std::ifstream in(path);
  CYPRIS_CHECK(in.good(), "--ui-script: cannot read '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_ui_script(ss.str(), path);
}

}  // namespace cypris
