// The Engine options panel, generated from the option table; see options_panel.h.
#include "app/ui/panels/options_panel.h"

#include <fmt/format.h>
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "app/ui/state/download_progress.h"
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

  const std::string view = std::move(ctx_.options_view_request);
  ctx_.options_view_request.clear();
  if (view == "advanced_all") show_no_effect_ = true;
  if (view == "advanced") show_no_effect_ = false;
  if (ImGui::BeginTabBar("views")) {
    if (ImGui::BeginTabItem("Quick", nullptr, view == "quick" ? ImGuiTabItemFlags_SetSelected : 0)) {
      draw_quick();
      ImGui::EndTabItem();
    }
    if (ImGui::BeginTabItem("Advanced", nullptr, view.rfind("advanced", 0) == 0 ? ImGuiTabItemFlags_SetSelected : 0)) {
      draw_advanced();
      ImGui::EndTabItem();
    }
    ImGui::EndTabBar();
  }
  ImGui::PopID();
}

void OptionsPanel::draw_quick() {
  QuickOptions& quick = *ctx_.quick;
  if (!machine_read_) {
    quick.refresh_machine(true);
    machine_read_ = true;
  }
  const ModelFootprint* fp = quick.footprint();
  if (ImGui::BeginTable("quick", 3, ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_RowBg)) {
    ImGui::TableSetupColumn("name", ImGuiTableColumnFlags_WidthStretch, 0.30f);
    ImGui::TableSetupColumn("value", ImGuiTableColumnFlags_WidthStretch, 0.70f);
    ImGui::TableSetupColumn("reset", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 3.2f);
    for (const char* name : {"model", "gguf-file"}) {
      if (const OptionSpec* s = find_option(name)) draw_option(*s);
    }
    // What the model is, read from its headers.
    ImGui::TableNextRow();
    ImGui::TableSetColumnIndex(1);
    if (fp) {
      ui::text_colored_wrapped(ui::kGrey, fmt::format("{} · {} · {} layers · context {}", fp->weight_label,
                                                      fp->architecture, fp->num_layers, fp->max_model_len));
    } else if (!ctx_.options->config().model.model.empty()) {
      ui::text_colored_wrapped(ui::kYellow, quick.footprint_error());
    }
    for (const char* name : {"max-model-len"}) {
      if (const OptionSpec* s = find_option(name)) draw_option(*s);
    }
    draw_gpu_layers(fp);
    for (const char* name : {"dtype", "quantization", "kv-cache-dtype", "device", "cpu-offload-gb"}) {
      if (const OptionSpec* s = find_option(name)) draw_option(*s);
    }
    ImGui::EndTable();
  }
  draw_memory();
  ImGui::TextDisabled("Every other option: the Advanced tab.");
}

void OptionsPanel::draw_gpu_layers(const ModelFootprint* fp) {
  QuickOptions& quick = *ctx_.quick;
  ImGui::PushID("gpu-layers");
  ImGui::TableNextRow();
  ImGui::TableSetColumnIndex(0);
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("gpu-layers");
  const OptionSpec* opt = QuickOptions::gpu_layers_option();
  ui::tooltip(opt ? help_of(*opt)
                  : std::string("The decoder layers to put on the GPU (the rest on the CPU). This build's engine "
                                "has no --gpu-layers option yet: every layer runs on --device."));
  ImGui::TableSetColumnIndex(1);
  const int layers = fp ? fp->num_layers : 0;
  constexpr int kUnset = QuickOptions::kGpuLayersUnset;
  const int cur = quick.gpu_layers().value_or(kUnset);
  ImGui::BeginDisabled(!opt);
  if (ImGui::RadioButton("all on --device", cur == kUnset)) quick.set_gpu_layers(kUnset);
  ImGui::SameLine();
  if (ImGui::RadioButton("auto", cur == -1)) quick.set_gpu_layers(-1);
  ImGui::SameLine();
  if (ImGui::RadioButton("first N", cur >= 0)) quick.set_gpu_layers(cur >= 0 ? cur : layers);
  ImGui::SetNextItemWidth(-1);
  int n = cur >= 0 ? cur : layers;
  ImGui::BeginDisabled(cur < 0 || layers == 0);
  if (ImGui::SliderInt("##n", &n, 0, std::max(layers, 1),
                       !layers    ? "(no model)"
                       : cur >= 0 ? "%d layers on the GPU"
                                  : "%d layers in the model")) {
    quick.set_gpu_layers(n);
  }
  ImGui::EndDisabled();
  ImGui::EndDisabled();
  if (cur == -1) {
    if (auto e = quick.estimate()) {
      ui::text_colored_wrapped(ui::kGrey, fmt::format("auto: {} of {} layers fit on the GPU", e->gpu_layers, layers));
    }
  }
  if (opt) {
    if (auto err = ctx_.options->field_error(opt->key())) ui::text_colored_wrapped(ui::kRed, *err);
  } else {
    ui::text_colored_wrapped(ui::kGrey, "not in this build's engine yet: every layer runs on --device");
  }
  ImGui::TableSetColumnIndex(2);
  if (opt && cur != kUnset && ImGui::SmallButton("Reset")) quick.set_gpu_layers(kUnset);
  ImGui::PopID();
}

void OptionsPanel::draw_memory() {
  QuickOptions& quick = *ctx_.quick;
  ImGui::Spacing();
  ImGui::TextUnformatted("Memory (estimated before loading)");
  ImGui::SameLine();
  if (ImGui::SmallButton("Refresh")) {
    quick.refresh_machine(true);
    quick.reload_model();
  }
  ui::help_marker(fmt::format(
      "Read from the model's headers, not measured. Weights: float tensors at --dtype, quantized ones as "
      "stored. KV cache per token: layers x 2 (K, V) x KV heads x head size x the cache type's bytes. "
      "GPU overhead: {} for the CUDA context, cuBLAS and activations, plus the sampler's [max-num-seqs, "
      "vocab] buffers. RAM overhead: {}. On a GPU the engine then fills --gpu-memory-utilization of the card "
      "with KV cache; on the CPU it takes --cpu-kvcache-space as it is used. While loading, the file's pages also "
      "show in RAM (page cache the system can drop): up to the file's size more than this.",
      format_bytes(kGpuOverheadBytes), format_bytes(kRamOverheadBytes)));
  const MachineMemory& m = quick.machine();
  const auto e = quick.estimate();
  if (!e) {
    if (!quick.estimate_error().empty())
      ui::text_colored_wrapped(ui::kRed, quick.estimate_error());
    else
      ImGui::TextDisabled("choose a downloaded model to see what it takes");
  }
  if (!ImGui::BeginTable("memory", 3, ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_BordersInnerH)) return;
  ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 4);
  ImGui::TableSetupColumn("needs", ImGuiTableColumnFlags_WidthStretch, 0.5f);
  ImGui::TableSetupColumn("this machine has", ImGuiTableColumnFlags_WidthStretch, 0.5f);
  ImGui::TableHeadersRow();
  const std::string ctx_tokens = e ? fmt::format("{} tokens", e->context) : std::string();

  ImGui::TableNextRow();
  ImGui::TableSetColumnIndex(0);
  ImGui::TextUnformatted("GPU");
  ImGui::TableSetColumnIndex(1);
  if (e && e->gpu_layers > 0) {
    ImGui::TextColored(e->fits_gpu ? ui::kGreen : ui::kRed, "%s%s%s", format_bytes(e->gpu_total()).c_str(),
                       e->gpus > 1 ? fmt::format(" on each of {} GPUs", e->gpus).c_str() : "",
                       e->fits_gpu ? "" : "  does not fit");
    ui::text_colored_wrapped(
        ui::kGrey, fmt::format("{} layers: weights {}, KV cache {} (one sequence of {}), "
                               "overhead {}",
                               e->gpu_layers, format_bytes(e->gpu_weight_bytes), format_bytes(e->gpu_kv_bytes),
                               ctx_tokens, format_bytes(e->gpu_overhead_bytes)));
    if (!e->offload.empty()) {
      ui::text_colored_wrapped(
          ui::kGrey, fmt::format("--cpu-offload-gb: layers {}..{} ({}) kept in RAM and copied to the GPU every "
                                 "step; their staging on the GPU {} (in the weights above)",
                                 e->offload.first_layer, e->offload.end_layer - 1,
                                 format_bytes(e->offload.offloaded_bytes), format_bytes(e->offload.staging_bytes())));
    }
    if (e->sequences_gpu >= 0) {
      ui::text_colored_wrapped(
          ui::kGrey, fmt::format("the cache then fills {:.0f}% of the card: room for {} "
                                 "full-length sequences",
                                 ctx_.options->config().cache.gpu_memory_utilization * 100, e->sequences_gpu));
    }
  } else {
    ImGui::TextDisabled(e ? "nothing (no layer on the GPU)" : "-");
  }
  ImGui::TableSetColumnIndex(2);
  if (m.gpu) {
    ImGui::TextUnformatted(m.gpu->name.c_str());
    ImGui::Text("%s total, %s free", format_bytes(m.gpu->total_bytes).c_str(), format_bytes(m.gpu->free_bytes).c_str());
  } else {
    ImGui::TextDisabled("no CUDA GPU");
  }

  ImGui::TableNextRow();
  ImGui::TableSetColumnIndex(0);
  ImGui::TextUnformatted("RAM");
  ImGui::TableSetColumnIndex(1);
  if (e) {
    ImGui::TextColored(e->fits_ram ? ui::kGreen : ui::kRed, "%s%s", format_bytes(e->ram_total()).c_str(),
                       e->fits_ram ? "" : "  more than is available");
    std::string kv =
        e->sequences_ram >= 0
            ? fmt::format("KV cache up to {} (--cpu-kvcache-space, taken as used: {} full-length sequences)",
                          format_bytes(e->ram_kv_bytes), e->sequences_ram)
            : std::string("no KV cache");
    ui::text_colored_wrapped(ui::kGrey, fmt::format("weights {}, {}, overhead {}", format_bytes(e->ram_weight_bytes),
                                                    kv, format_bytes(e->ram_overhead_bytes)));
    if (e->sequences_ram == 0) {
      ui::text_colored_wrapped(ui::kYellow, "--cpu-kvcache-space holds less than one full-length sequence");
    }
  } else {
    ImGui::TextDisabled("-");
  }
  ImGui::TableSetColumnIndex(2);
  ImGui::Text("%s total, %s available", format_bytes(m.ram_total_bytes).c_str(),
              format_bytes(m.ram_available_bytes).c_str());
  ImGui::EndTable();
  if (e) {
    ImGui::TextDisabled("KV cache: %s per token (all layers)", format_bytes(e->kv_bytes_per_token).c_str());
  }
}

void OptionsPanel::draw_advanced() {
  OptionsForm& form = *ctx_.options;
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 14);
  ImGui::InputTextWithHint("##filter", "Search options", &filter_);
  ImGui::SameLine();
  ImGui::Checkbox("Changed only", &only_changed_);
  ImGui::Checkbox("Show options without effect", &show_no_effect_);
  ui::tooltip(
      fmt::format("{} options are accepted for compatibility with Aphrodite scripts but change nothing in "
                  "Cypris (e.g. --trust-remote-code: architectures are native code)",
                  OptionsForm::no_effect_count()));
  ImGui::SameLine();
  if (ui::button("Reset all", form.changed_count() > 0)) {
    form.reset_all();
    text_.clear();
  }

  const std::string needle = lower(filter_);
  for (const auto& section : form.advanced_sections(show_no_effect_)) {
    std::vector<const OptionSpec*> shown;
    for (const OptionSpec* s : section.options) {
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
    const bool default_open = section.title == "Common options";
    if (!ImGui::TreeNodeEx(section.title.c_str(), default_open ? ImGuiTreeNodeFlags_DefaultOpen : 0)) continue;
    if (ImGui::BeginTable("opts", 3, ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_RowBg)) {
      ImGui::TableSetupColumn("name", ImGuiTableColumnFlags_WidthStretch, 0.42f);
      ImGui::TableSetupColumn("value", ImGuiTableColumnFlags_WidthStretch, 0.58f);
      ImGui::TableSetupColumn("reset", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 3.2f);
      for (const OptionSpec* s : shown) draw_option(*s);
      ImGui::EndTable();
    }
    ImGui::TreePop();
  }
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
    std::string hint = t == OptionType::StringList ? "comma separated" : (s.binding.nullable ? "(unset)" : "");
    if (s.name == "model") hint = "Hugging Face repo (org/name), a local folder or a .gguf file";
    if (s.name == "max-model-len") {
      const ModelFootprint* fp = ctx_.quick->footprint();
      hint = fp ? fmt::format("the model's: {}", fp->max_model_len) : "the model's";
    }
    ImGui::InputTextWithHint("##v", hint.c_str(), &it->second);
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
