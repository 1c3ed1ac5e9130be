// Chat template rendering and selection (see chat_template.h).
#include "engine/chat/chat_template.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/chat/jinja/ast.h"
#include "engine/chat/jinja/globals.h"
#include "engine/chat/jinja/interpreter.h"
#include "engine/chat/jinja/parser.h"
#include "engine/common/error.h"
#include "engine/common/resources.h"

namespace cypris {
namespace {

jinja::Value from_json(const nlohmann::ordered_json& j, int depth = 0) {
  CYPRIS_CHECK(depth < 256, "chat template input: JSON nested more than 256 levels");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return jinja::Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return jinja::Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return jinja::Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return jinja::Value(static_cast<double>(u));
      return jinja::Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return jinja::Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return jinja::Value(j.get_ref<const std::string&>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<jinja::Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return jinja::Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::Value d = jinja::Value::dict();
      d.as_dict().items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        jinja::Value v = from_json(it.value(), depth + 1);
        d.as_dict().depth = std::max(d.as_dict().depth, 1 + v.depth());
        d.as_dict().items.emplace_back(it.key(), std::move(v));  // JSON keys are unique
      }
      return d;
    }
    default:
      CYPRIS_FAIL("chat template input: unsupported JSON value (binary or discarded)");
  }
}

std::string read_file(const std::filesystem::path& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  CYPRIS_CHECK(in, "{}: cannot read '{}'", what, path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source)
    : source_(std::move(source)), template_(jinja::parse_template(source_)) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const ChatTemplateInputs& inputs) const {
  CYPRIS_CHECK(messages.is_array(), "chat template: messages must be a JSON array, got {}", messages.type_name());
  CYPRIS_CHECK(inputs.extra.is_null() || inputs.extra.is_object(),
               "chat template: extra variables must be a JSON object, got {}", inputs.extra.type_name());
  jinja::Interpreter interp(*template_);
  jinja::install_globals(interp);
  if (inputs.clock) interp.set_clock(inputs.clock);
  interp.set_global("messages", from_json(messages));
  interp.set_global("add_generation_prompt", jinja::Value(inputs.add_generation_prompt));
  interp.set_global("bos_token", jinja::Value(inputs.bos_token));
  interp.set_global("eos_token", jinja::Value(inputs.eos_token));
  interp.set_global("tools", from_json(inputs.tools));
  interp.set_global("documents", from_json(inputs.documents));
  // Extra variables come last so a caller can also replace the standard ones.
  if (inputs.extra.is_object())
    for (auto it = inputs.extra.begin(); it != inputs.extra.end(); ++it)
      interp.set_global(it.key(), from_json(it.value()));
  return interp.render();
}

std::string chatml_fallback_template() {
  return read_file(resources_dir() / "chat_templates" / "chatml.jinja",
                   "ChatML fallback chat template");
}

std::string select_chat_template(const std::vector<NamedChatTemplate>& templates, bool with_tools,
                                 const std::optional<std::string>& override_template) {
  if (override_template && !override_template->empty()) {
    const std::string& o = *override_template;
    std::error_code ec;
    if (std::filesystem::is_regular_file(o, ec)) return read_file(o, "--chat-template");
    CYPRIS_CHECK(o.find("{{") != std::string::npos || o.find("{%") != std::string::npos,
                 "--chat-template: '{}' is neither a readable file nor template text (containing '{{{{' or '{{%')", o);
    return o;
  }
  auto find = [&](std::string_view name) -> const NamedChatTemplate* {
    for (const auto& t : templates)
      if (t.name == name) return &t;
    return nullptr;
  };
  if (with_tools)
    if (const auto* t = find("tool_use")) return t->source;
  if (const auto* t = find("default")) return t->source;
  if (templates.size() == 1) return templates[0].source;
  if (templates.empty()) return chatml_fallback_template();
  std::string names;
  for (const auto& t : templates) names += (names.empty() ? "" : ", ") + t.name;
  CYPRIS_FAIL("the model has several chat templates ({}) and none is named 'default'; pick one with --chat-template",
              names);
}

}  // namespace cypris
