// The Samplers panel; see samplers_panel.h.
#include "app/ui/panels/samplers_panel.h"

#include <fmt/format.h>
#include <imgui.h>
#include <imgui_stdlib.h>

#include <filesystem>

#include "app/ui/widgets.h"

namespace cypris {

using json = nlohmann::json;

namespace {

std::string item_text(const json& e) {
  if (!e.is_string()) return e.dump();
  std::string s = e.get<std::string>();
  return s == "\n" ? "\\n" : s;
}

// The text shown in a list field: "a, b", "5:-100, 7:2.5" for a bias map, "" when unset.
std::string value_text(const json& v) {
  std::string out;
  if (v.is_object()) {
    for (const auto& [k, b] : v.items()) out += (out.empty() ? "" : ", ") + k + ":" + b.dump();
  } else if (v.is_array()) {
    for (const auto& e : v) out += (out.empty() ? "" : ", ") + item_text(e);
  }
  return out;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t a = item.find_first_not_of(' ');
    size_t b = item.find_last_not_of(' ');
    item = a == std::string::npos ? "" : item.substr(a, b - a + 1);
    if (item == "\\n") item = "\n";
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

long long parse_int(const std::string& t) {
  size_t used = 0;
  long long v = std::stoll(t, &used);
  if (used != t.size()) throw std::invalid_argument("'" + t + "' is not a whole number");
  return v;
}

json parse_text(const std::string& text, const SamplerSpec& spec) {
  auto items = split_commas(text);
  if (items.empty() && spec.optional) return nullptr;
  if (spec.type == SamplerType::TokenBias) {
    json out = json::object();
    for (const auto& it : items) {
      size_t colon = it.find(':');
      if (colon == std::string::npos) throw std::invalid_argument("expected id:bias");
      out[std::to_string(parse_int(it.substr(0, colon)))] = std::stod(it.substr(colon + 1));
    }
    return out;
  }
  json out = json::array();
  for (const auto& it : items) {
    if (spec.type == SamplerType::IntList) {
      out.push_back(parse_int(it));
    } else {
      out.push_back(it);
    }
  }
  return out;
}

}  // namespace

void SamplersPanel::reload_presets() {
  preset_errors_.clear();
  presets_ = load_sampler_presets(ctx_.presets_dir, &preset_errors_);
  auto mine = load_sampler_presets(user_presets_dir(ctx_.config_dir), &preset_errors_);
  presets_.insert(presets_.end(), mine.begin(), mine.end());
  loaded_ = true;
}

void SamplersPanel::apply_saved_preset() {
  reload_presets();
  for (const auto& p : presets_) {
    if (p.name == ctx_.settings->last_sampler_preset) {
      try {
        ctx_.chat->samplers().apply_preset(p.json, p.path);
      } catch (const std::exception& e) {
        message_ = e.what();
        message_error_ = true;
      }
    }
  }
}

void SamplersPanel::draw() {
  if (!header()) return;
  if (!loaded_) reload_presets();
  SamplerSettings& s = ctx_.chat->samplers();
  ImGui::PushID("samplers");
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Preset");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 12);
  const std::string& cur = ctx_.settings->last_sampler_preset;
  if (ImGui::BeginCombo("##preset", cur.empty() ? "(custom)" : cur.c_str())) {
    for (const auto& p : presets_) {
      if (ImGui::Selectable(p.name.c_str(), p.name == cur)) {
        try {
          s.apply_preset(p.json, p.path);
          text_.clear();
          ctx_.settings->last_sampler_preset = p.name;
          ctx_.save_settings();
          message_.clear();
        } catch (const std::exception& e) {
          message_ = e.what();
          message_error_ = true;
        }
      }
      ui::tooltip(p.description);
    }
    ImGui::EndCombo();
  }
  ImGui::SameLine();
  if (ImGui::Button("Reset all")) {
    s.reset_all();
    text_.clear();
    ctx_.settings->last_sampler_preset.clear();
  }
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 10);
  ImGui::InputTextWithHint("##savename", "preset name", &save_name_);
  ImGui::SameLine();
  if (ui::button("Save preset", !save_name_.empty() && save_name_.find('/') == std::string::npos)) {
    try {
      auto path = std::filesystem::path(user_presets_dir(ctx_.config_dir)) / (save_name_ + ".json");
      save_sampler_preset(path.string(), s, save_name_);
      ctx_.settings->last_sampler_preset = save_name_;
      ctx_.save_settings();
      message_ = "saved " + path.string();
      message_error_ = false;
      reload_presets();
    } catch (const std::exception& e) {
      message_ = e.what();
      message_error_ = true;
    }
  }
  if (!message_.empty()) ui::text_colored_wrapped(message_error_ ? ui::kRed : ui::kGrey, message_);
  for (const auto& e : preset_errors_) ui::text_colored_wrapped(ui::kYellow, e);

  draw_structured_output();
  for (const auto& group : sampler_groups()) {
    if (!ImGui::TreeNodeEx(group.c_str(), group == "Common" ? ImGuiTreeNodeFlags_DefaultOpen : 0)) continue;
    for (const auto& spec : sampler_table()) {
      if (spec.group == group) draw_param(spec);
    }
    ImGui::TreePop();
  }
  ImGui::PopID();
}

// A mode and a multi-line text, checked by the server's guided-decoding front end once the text has
// stopped changing (not every frame); the result under the box.
void SamplersPanel::draw_structured_output() {
  ChatSession& chat = *ctx_.chat;
  StructuredOutput& f = chat.samplers().structured();
  StructuredOutputValidator& check = chat.structured_check();
  check.poll(f, ImGui::GetTime());
  const std::string label = f.mode == StructuredMode::Off
                                ? std::string("Structured output###structured")
                                : fmt::format("Structured output: {}###structured", structured_mode_label(f.mode));
  if (!ImGui::TreeNodeEx(label.c_str(), f.mode == StructuredMode::Off ? 0 : ImGuiTreeNodeFlags_DefaultOpen)) return;
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.55f);
  if (ImGui::BeginCombo("Mode", structured_mode_label(f.mode))) {
    for (StructuredMode m : structured_modes()) {
      if (ImGui::Selectable(structured_mode_label(m), m == f.mode)) {
        f.mode = m;
        ctx_.settings->last_sampler_preset.clear();
      }
    }
    ImGui::EndCombo();
  }
  ui::tooltip(
      "Makes the reply match a grammar (guided decoding), as the API's guided_json, guided_regex, "
      "guided_choice and grammar fields do. Saved with your sampler presets.");
  if (f.mode != StructuredMode::Off) {
    const char* hint = "";
    switch (f.mode) {
      case StructuredMode::JsonSchema: hint = "{\"type\": \"object\", \"properties\": {...}}"; break;
      case StructuredMode::Regex: hint = "[A-Z][a-z]+ \\d{4}"; break;
      case StructuredMode::Choice: hint = "yes\nno"; break;
      case StructuredMode::Gbnf: hint = "root ::= \"yes\" | \"no\""; break;
      case StructuredMode::Off: break;
    }
    if (ImGui::InputTextMultiline("##structured_text", &f.text,
                                  ImVec2(-FLT_MIN, ImGui::GetTextLineHeight() * 8), ImGuiInputTextFlags_AllowTabInput)) {
      ctx_.settings->last_sampler_preset.clear();
    }
    if (f.text.empty()) ui::text_colored_wrapped(ui::kGrey, std::string("e.g. ") + hint);
    const StructuredCheck& r = check.result();
    if (check.pending(f)) {
      ui::text_colored_wrapped(ui::kGrey, "checking...");
    } else if (r.state == StructuredCheck::State::Valid) {
      ui::text_colored_wrapped(ui::kGreen, "valid");
    } else if (r.state == StructuredCheck::State::Invalid) {
      ui::text_colored_wrapped(ui::kRed, r.message);
      ui::text_colored_wrapped(ui::kGrey, "Send still works: the message goes without the grammar.");
    } else if (r.state == StructuredCheck::State::Empty) {
      ui::text_colored_wrapped(ui::kGrey, r.message);
    }
  }
  ImGui::TreePop();
}

void SamplersPanel::draw_param(const SamplerSpec& spec) {
  SamplerSettings& s = ctx_.chat->samplers();
  ImGui::PushID(spec.key.c_str());
  const json v = s.get(spec.key);
  const float reset_w = ImGui::GetFontSize() * 3.5f;
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.55f);
  auto set = [&](const json& x) {
    try {
      s.set(spec.key, x, "sampler");
      ctx_.settings->last_sampler_preset.clear();
    } catch (const std::exception&) {
      // The slider ranges lie within the limits; typed values out of range are not applied.
    }
  };
  // Optional parameters: a box switches them on (a value) or off (unset: the engine decides).
  if (spec.optional && (spec.type == SamplerType::Float || spec.type == SamplerType::Int)) {
    bool on = !v.is_null();
    if (ImGui::Checkbox("##on", &on)) {
      if (on) {
        set(spec.type == SamplerType::Int ? json(static_cast<int64_t>(std::max(0.0, spec.slider_min)))
                                          : json(std::max(0.0, spec.slider_min)));
      } else {
        set(nullptr);
      }
    }
    ui::tooltip(on ? "Set: untick to leave it to the engine" : "Unset: tick to choose a value");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.5f);
  }
  const json& cur_v = s.get(spec.key);
  switch (spec.type) {
    case SamplerType::Float: {
      float x = cur_v.is_null() ? static_cast<float>(spec.slider_min) : static_cast<float>(cur_v.get<double>());
      ImGui::BeginDisabled(cur_v.is_null());
      if (ImGui::SliderFloat(spec.label.c_str(), &x, static_cast<float>(spec.slider_min),
                             static_cast<float>(spec.slider_max), "%.3f")) {
        set(static_cast<double>(x));
      }
      ImGui::EndDisabled();
      break;
    }
    case SamplerType::Int: {
      long long x =
          cur_v.is_null() ? static_cast<long long>(spec.slider_min) : static_cast<long long>(cur_v.get<int64_t>());
      long long lo = static_cast<long long>(spec.slider_min), hi = static_cast<long long>(spec.slider_max);
      ImGui::BeginDisabled(cur_v.is_null());
      if (ImGui::SliderScalar(spec.label.c_str(), ImGuiDataType_S64, &x, &lo, &hi, "%lld")) set(int64_t{x});
      ImGui::EndDisabled();
      break;
    }
    case SamplerType::Bool: {
      bool b = cur_v.get<bool>();
      if (ImGui::Checkbox(spec.label.c_str(), &b)) set(b);
      break;
    }
    case SamplerType::Choice: {
      std::string cur = cur_v.is_string() ? cur_v.get<std::string>() : cur_v.dump();
      if (ImGui::BeginCombo(spec.label.c_str(), cur.c_str())) {
        for (const auto& c : spec.choices) {
          if (ImGui::Selectable(c.c_str(), c == cur)) set(c);
        }
        ImGui::EndCombo();
      }
      break;
    }
    case SamplerType::StringList:
    case SamplerType::IntList:
    case SamplerType::SamplerOrder:
    case SamplerType::TokenBias: {
      auto it = text_.find(spec.key);
      if (it == text_.end()) it = text_.emplace(spec.key, value_text(cur_v)).first;
      const char* hint = spec.type == SamplerType::TokenBias ? "id:bias, id:bias" : "comma separated";
      ImGui::InputTextWithHint(spec.label.c_str(), hint, &it->second);
      if (ImGui::IsItemDeactivatedAfterEdit()) {
        try {
          set(parse_text(it->second, spec));
        } catch (const std::exception&) {
        }
        it->second = value_text(s.get(spec.key));
      }
      break;
    }
  }
  ui::tooltip(
      spec.help + "\n\nRequest field: " + spec.key + "   Default: " + spec.default_value.dump() +
      (spec.type == SamplerType::Float || spec.type == SamplerType::Int ? "\nCtrl+click to type a value." : ""));
  if (!s.is_default(spec.key)) {
    ImGui::SameLine(ImGui::GetContentRegionMax().x - reset_w);
    if (ImGui::SmallButton("Reset")) {
      s.reset(spec.key);
      text_.erase(spec.key);
    }
  }
  ImGui::PopID();
}

}  // namespace cypris
