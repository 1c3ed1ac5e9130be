// The Samplers panel; see samplers_panel.h.
#include "app/ui/panels/samplers_panel.h"

#include <filesystem>

#include <imgui.h>
#include <imgui_stdlib.h>

#include "app/ui/widgets.h"

namespace cypris {

using json = nlohmann::json;

namespace {

std::string list_text(const json& v) {
  std::string out;
  for (const auto& e : v) {
    if (!out.empty()) out += ", ";
    if (e.is_string()) {
      std::string s = e.get<std::string>();
      if (s == "\n") s = "\\n";
      out += s;
    } else {
      out += e.dump();
    }
  }
  return out;
}

json parse_list(const std::string& text, bool ints) {
  json out = json::array();
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t a = item.find_first_not_of(' ');
    size_t b = item.find_last_not_of(' ');
    item = a == std::string::npos ? "" : item.substr(a, b - a + 1);
    if (item == "\\n") item = "\n";
    if (!item.empty()) {
      if (ints) {
        size_t used = 0;
        long long v = std::stoll(item, &used);
        if (used != item.size()) throw std::invalid_argument("'" + item + "' is not a token id");
        out.push_back(v);
      } else {
        out.push_back(item);
      }
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
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

  for (const auto& group : sampler_groups()) {
    if (!ImGui::TreeNodeEx(group.c_str(), group == "Basic" ? ImGuiTreeNodeFlags_DefaultOpen : 0)) continue;
    for (const auto& spec : sampler_table()) {
      if (spec.group == group) draw_param(spec);
    }
    ImGui::TreePop();
  }
  ImGui::PopID();
}

void SamplersPanel::draw_param(const SamplerSpec& spec) {
  SamplerSettings& s = ctx_.chat->samplers();
  ImGui::PushID(spec.key.c_str());
  const json& v = s.get(spec.key);
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
  switch (spec.type) {
    case SamplerType::Float: {
      float x = static_cast<float>(v.get<double>());
      if (ImGui::SliderFloat(spec.label.c_str(), &x, static_cast<float>(spec.slider_min),
                             static_cast<float>(spec.slider_max), "%.3f")) {
        set(static_cast<double>(x));
      }
      break;
    }
    case SamplerType::Int: {
      int x = static_cast<int>(v.get<int64_t>());
      if (ImGui::SliderInt(spec.label.c_str(), &x, static_cast<int>(spec.slider_min),
                           static_cast<int>(spec.slider_max))) {
        set(int64_t{x});
      }
      break;
    }
    case SamplerType::Bool: {
      bool b = v.get<bool>();
      if (ImGui::Checkbox(spec.label.c_str(), &b)) set(b);
      break;
    }
    case SamplerType::Choice: {
      std::string cur = v.is_string() ? v.get<std::string>() : v.dump();
      if (ImGui::BeginCombo(spec.label.c_str(), cur.c_str())) {
        for (const auto& c : spec.choices) {
          if (ImGui::Selectable(c.c_str(), c == cur)) set(c);
        }
        ImGui::EndCombo();
      }
      break;
    }
    case SamplerType::StringList:
    case SamplerType::IntList: {
      auto it = text_.find(spec.key);
      if (it == text_.end()) it = text_.emplace(spec.key, list_text(v)).first;
      ImGui::InputTextWithHint(spec.label.c_str(), "comma separated", &it->second);
      if (ImGui::IsItemDeactivatedAfterEdit()) {
        try {
          set(parse_list(it->second, spec.type == SamplerType::IntList));
        } catch (const std::exception&) {
        }
        it->second = list_text(s.get(spec.key));
      }
      break;
    }
  }
  ui::tooltip(spec.help + "\n\nRequest field: " + spec.key + "   Default: " + spec.default_value.dump() +
              (spec.type == SamplerType::Float || spec.type == SamplerType::Int ? "\nCtrl+click to type a value."
                                                                                : ""));
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
