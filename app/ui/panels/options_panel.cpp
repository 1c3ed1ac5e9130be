// The Engine options panel, generated from the option table; see options_panel.h.
#include "app/ui/panels/options_panel.h"

#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "app/ui/widgets.h"

namespace cypris {

using json = nlohmann::json;

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string help_of(const OptionSpec& s) {
  std::string h = s.flag() + "\n\n" + s.help;
  if (!s.choices.empty()) {
    h += "\n\nChoices:";
    for (const auto& c : s.choices) {
      if (!s.refusal(c)) h += " " + c;
    }
  }
  for (const auto& [c, why] : s.refused) h += "\n" + c + ": " + why;
  if (s.support == OptionSupport::NoEffect) h += "\n\nNo effect in Cypris: " + s.note;
  if (s.support == OptionSupport::NotYet) h += "\n\nNot supported yet: " + s.note;
  h += "\n\nDefault: " + (s.default_value().is_null() ? std::string("(unset)") : s.default_value().dump());
  return h;
}

}  // namespace

void OptionsPanel::draw() {
  if (!header(!ctx_.options->config().model.model.empty())) return;
  OptionsForm& form = *ctx_.options;
  ImGui::PushID("options");

  const auto& v = form.validate();
  if (v.ok) {
    ui::text_colored_wrapped(ui::kGreen, "Options are valid: ready to load.");
  } else {
    ui::text_colored_wrapped(ui::kRed, v.error);
  }
  for (const auto& w : v.warnings) ui::text_colored_wrapped(ui::kYellow, w);

  draw_profiles();

  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 14);
  ImGui::InputTextWithHint("##filter", "Search options", &filter_);
  ImGui::SameLine();
  ImGui::Checkbox("Changed only", &only_changed_);
  ImGui::SameLine();
  if (ui::button("Reset all", form.changed_count() > 0)) {
    form.reset_all();
    text_.clear();
  }

  const std::string needle = lower(filter_);
  for (const auto& group : OptionsForm::groups()) {
    std::vector<const OptionSpec*> shown;
    for (const OptionSpec* s : OptionsForm::options_in(group)) {
      if (only_changed_ && form.is_default(*s)) continue;
      if (!needle.empty() && lower(s->name).find(needle) == std::string::npos &&
          lower(s->help).find(needle) == std::string::npos) {
        continue;
      }
      shown.push_back(s);
    }
    if (shown.empty()) continue;
    // Searching opens every group with a match.
    if (!needle.empty() || only_changed_) ImGui::SetNextItemOpen(true, ImGuiCond_Always);
    const bool default_open = group == "Model Options";
    if (!ImGui::TreeNodeEx(group.c_str(), default_open ? ImGuiTreeNodeFlags_DefaultOpen : 0)) continue;
    if (ImGui::BeginTable("opts", 3, ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_RowBg)) {
      ImGui::TableSetupColumn("name", ImGuiTableColumnFlags_WidthStretch, 0.42f);
      ImGui::TableSetupColumn("value", ImGuiTableColumnFlags_WidthStretch, 0.58f);
      ImGui::TableSetupColumn("reset", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 3.2f);
      for (const OptionSpec* s : shown) draw_option(*s);
      ImGui::EndTable();
    }
    ImGui::TreePop();
  }
  ImGui::PopID();
}

void OptionsPanel::draw_profiles() {
  OptionsForm& form = *ctx_.options;
  const std::string dir = profiles_dir(ctx_.config_dir);
  auto profiles = list_profiles(dir);
  ImGui::TextUnformatted("Profile");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 10);
  const std::string& current = ctx_.settings->last_profile;
  if (ImGui::BeginCombo("##profile", current.empty() ? "(none)" : current.c_str())) {
    for (const auto& p : profiles) {
      if (ImGui::Selectable(p.c_str(), p == current)) {
        try {
          form.load_profile((std::filesystem::path(dir) / (p + ".json")).string());
          text_.clear();
          ctx_.settings->last_profile = p;
          ctx_.save_settings();
          profile_message_ = "loaded profile " + p;
          profile_error_ = false;
        } catch (const std::exception& e) {
          profile_message_ = e.what();
          profile_error_ = true;
        }
      }
    }
    if (profiles.empty()) ImGui::TextDisabled("no saved profiles yet");
    ImGui::EndCombo();
  }
  ui::tooltip("Load a saved set of options (" + dir + ")");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 8);
  ImGui::InputTextWithHint("##profname", "name", &profile_name_);
  ImGui::SameLine();
  bool name_ok = !profile_name_.empty() && profile_name_.find_first_of("/\\") == std::string::npos;
  if (ui::button("Save profile", name_ok)) {
    try {
      form.save_profile((std::filesystem::path(dir) / (profile_name_ + ".json")).string());
      ctx_.settings->last_profile = profile_name_;
      ctx_.save_settings();
      profile_message_ = "saved profile " + profile_name_;
      profile_error_ = false;
    } catch (const std::exception& e) {
      profile_message_ = e.what();
      profile_error_ = true;
    }
  }
  if (!profile_message_.empty()) ui::text_colored_wrapped(profile_error_ ? ui::kRed : ui::kGrey, profile_message_);
}

void OptionsPanel::draw_option(const OptionSpec& s) {
  OptionsForm& form = *ctx_.options;
  const std::string key = s.key();
  ImGui::PushID(key.c_str());
  ImGui::TableNextRow();
  ImGui::TableSetColumnIndex(0);
  ImGui::AlignTextToFramePadding();
  const bool changed = !form.is_default(s);
  if (s.support == OptionSupport::NotYet) {
    ImGui::TextDisabled("%s", s.name.c_str());
  } else if (changed) {
    ImGui::TextColored(ui::kYellow, "%s", s.name.c_str());
  } else {
    ImGui::TextUnformatted(s.name.c_str());
  }
  ui::tooltip(help_of(s));

  ImGui::TableSetColumnIndex(1);
  ImGui::SetNextItemWidth(-1);
  // NotYet options stay editable only when already changed (so the user can put them back).
  const bool disabled = s.support == OptionSupport::NotYet && !changed;
  ImGui::BeginDisabled(disabled);
  json v = form.value(s);
  const OptionType t = s.binding.type;
  if (t == OptionType::Bool) {
    bool b = v.get<bool>();
    if (ImGui::Checkbox("##v", &b)) form.set_value(key, b);
  } else if (!s.choices.empty() && t != OptionType::StringList) {
    std::string cur = v.is_null() ? "" : (v.is_string() ? v.get<std::string>() : v.dump());
    if (ImGui::BeginCombo("##v", cur.empty() ? "(unset)" : cur.c_str())) {
      if (s.binding.nullable && ImGui::Selectable("(unset)", cur.empty())) form.set_value(key, nullptr);
      for (const auto& c : s.choices) {
        // Choices Cypris refuses are listed greyed out, with the reason on hover.
        const std::string* why = s.refusal(c);
        ImGui::BeginDisabled(why != nullptr);
        if (ImGui::Selectable(c.c_str(), c == cur)) form.set_text(key, c);
        ImGui::EndDisabled();
        if (why) ui::tooltip(*why);
      }
      ImGui::EndCombo();
    }
  } else if ((t == OptionType::Int || t == OptionType::Float) && !s.binding.nullable) {
    if (t == OptionType::Int) {
      auto x = static_cast<long long>(v.get<int64_t>());
      if (s.min && s.max && *s.max - *s.min <= 1024) {
        long long lo = static_cast<long long>(*s.min), hi = static_cast<long long>(*s.max);
        if (ImGui::SliderScalar("##v", ImGuiDataType_S64, &x, &lo, &hi)) form.set_value(key, int64_t{x});
      } else if (ImGui::InputScalar("##v", ImGuiDataType_S64, &x, nullptr, nullptr, "%lld")) {
        form.set_value(key, int64_t{x});
      }
    } else {
      double x = v.get<double>();
      if (s.min && s.max) {
        double lo = *s.min, hi = *s.max;
        if (ImGui::SliderScalar("##v", ImGuiDataType_Double, &x, &lo, &hi, "%.3f")) form.set_value(key, x);
      } else if (ImGui::InputDouble("##v", &x, 0.0, 0.0, "%.4g")) {
        form.set_value(key, x);
      }
    }
  } else {
    // Text: strings, lists (comma separated) and optional numbers (empty = unset).
    auto it = text_.find(key);
    if (it == text_.end()) it = text_.emplace(key, form.text(s)).first;
    const char* hint = t == OptionType::StringList ? "comma separated" : (s.binding.nullable ? "(unset)" : "");
    if (s.name == "model") hint = "Hugging Face repo (org/name) or a local folder";
    ImGui::InputTextWithHint("##v", hint, &it->second);
    if (ImGui::IsItemDeactivatedAfterEdit()) {
      if (form.set_text(key, it->second)) it->second = form.text(s);
    } else if (!ImGui::IsItemActive() && !form.field_error(key)) {
      it->second = form.text(s);  // follow changes from profiles, reset and scripts
    }
  }
  ImGui::EndDisabled();
  if (disabled) {
    ui::tooltip("Not supported yet: " + s.note);
    ImGui::TextDisabled("not yet: %s", s.note.c_str());
  }
  if (auto err = form.field_error(key)) ui::text_colored_wrapped(ui::kRed, *err);
  if (s.support == OptionSupport::NoEffect && changed) ui::text_colored_wrapped(ui::kYellow, "no effect: " + s.note);

  ImGui::TableSetColumnIndex(2);
  if (changed || form.field_error(key)) {
    if (ImGui::SmallButton("Reset")) {
      form.reset(key);
      text_.erase(key);
    }
    ui::tooltip("Back to the default");
  }
  ImGui::PopID();
}

}  // namespace cypris
