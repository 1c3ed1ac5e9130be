// The Models panel; see models_panel.h.
#include "app/ui/panels/models_panel.h"

#include <fmt/format.h>
#include <imgui.h>
#include <imgui_stdlib.h>

#include <filesystem>

#include "app/ui/state/model_catalogue.h"
#include "app/ui/widgets.h"

namespace cypris {

void ModelsPanel::draw() {
  // A first start has no model yet: that is where to begin.
  if (!header(ctx_.options->config().model.model.empty())) return;
  ImGui::PushID("models");
  if (!cache_loaded_) {
    ctx_.hub->refresh_cache();
    cache_loaded_ = true;
  }
  draw_selected();
  draw_catalogue();
  draw_search();
  draw_repo();
  draw_download();
  ImGui::Separator();
  draw_cache();
  ImGui::Separator();
  draw_local();
  ImGui::Separator();
  draw_adapters();
  ImGui::PopID();
}

void ModelsPanel::draw_selected() {
  const std::string& model = ctx_.options->config().model.model;
  if (!model.empty()) {
    ImGui::TextUnformatted("Selected:");
    ImGui::SameLine();
    ImGui::TextUnformatted(model.c_str());
    ImGui::SameLine();
    if (const ModelFootprint* fp = ctx_.quick->footprint()) {
      ImGui::TextColored(ui::kGreen, "%s", fp->weight_label.c_str());
      ui::tooltip(fmt::format("{}\n{} layers, {} KV heads of {}, context {}\n{}", fp->architecture, fp->num_layers,
                              fp->num_kv_heads, fp->head_dim, fp->max_model_len, fp->path));
    } else {
      ImGui::TextDisabled("(weights not readable yet)");
      ui::tooltip(ctx_.quick->footprint_error());
    }
  }
  if (ctx_.engine->loaded()) {
    const ModelOptions& mo = ctx_.engine->loaded_config().model;
    const std::string key = mo.model + '\n' + mo.gguf_file.value_or("");
    if (key != loaded_key_) {
      loaded_key_ = key;
      try {
        loaded_label_ = weight_type_label(find_local_model(mo));
      } catch (const std::exception&) {
        loaded_label_ = "?";
      }
    }
    ImGui::Text("Loaded: %s", mo.model.c_str());
    ImGui::SameLine();
    ImGui::TextColored(ui::kGreen, "%s", loaded_label_.c_str());
  }
  if (!model.empty() || ctx_.engine->loaded()) ImGui::Separator();
}

void ModelsPanel::draw_search() {
  HubSession& hub = *ctx_.hub;
  ImGui::TextUnformatted("Search the Hugging Face Hub");
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 16);
  bool go = ImGui::InputTextWithHint("##q", "e.g. llama 8b instruct", &query_, ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::SameLine();
  go = ui::button("Search", !query_.empty() && !hub.searching()) || (go && !query_.empty());
  if (go) hub.search(query_);
  if (hub.searching()) {
    ImGui::SameLine();
    ImGui::TextDisabled("searching...");
  }
  if (!hub.search_error().empty()) ui::text_colored_wrapped(ui::kRed, hub.search_error());
  if (!hub.results().empty()) {
    const float h = ImGui::GetTextLineHeightWithSpacing() * std::min<float>(8.5f, hub.results().size() + 1.5f);
    if (ImGui::BeginTable("results", 3, ImGuiTableFlags_ScrollY | ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersOuter,
                          ImVec2(0, h))) {
      ImGui::TableSetupScrollFreeze(0, 1);
      ImGui::TableSetupColumn("Repository", ImGuiTableColumnFlags_WidthStretch);
      ImGui::TableSetupColumn("Downloads", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 6);
      ImGui::TableSetupColumn("Likes", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 4);
      ImGui::TableHeadersRow();
      for (const auto& r : hub.results()) {
        ImGui::TableNextRow();
        ImGui::TableSetColumnIndex(0);
        if (ImGui::Selectable(r.repo.c_str(), r.repo == hub.repo(), ImGuiSelectableFlags_SpanAllColumns)) {
          hub.select_repo(r.repo);
        }
        ImGui::TableSetColumnIndex(1);
        ImGui::Text("%lld", static_cast<long long>(r.downloads));
        ImGui::TableSetColumnIndex(2);
        ImGui::Text("%lld", static_cast<long long>(r.likes));
      }
      ImGui::EndTable();
    }
  }
}

void ModelsPanel::draw_catalogue() {
  HubSession& hub = *ctx_.hub;
  // Open on a first start (no model yet); afterwards it keeps whatever the user left it at.
  ImGui::SetNextItemOpen(ctx_.options->config().model.model.empty(), ImGuiCond_Once);
  if (!ImGui::TreeNode("Popular models")) return;
  const auto& entries = model_catalogue();
  const float h = ImGui::GetTextLineHeightWithSpacing() * std::min<float>(8.5f, entries.size() + 1.5f);
  if (ImGui::BeginTable("catalogue", 3, ImGuiTableFlags_ScrollY | ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersOuter,
                        ImVec2(0, h))) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("Family", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 8);
    ImGui::TableSetupColumn("Repository", ImGuiTableColumnFlags_WidthStretch);
    ImGui::TableSetupColumn("Note", ImGuiTableColumnFlags_WidthStretch);
    ImGui::TableHeadersRow();
    for (size_t i = 0; i < entries.size(); ++i) {
      const CatalogueEntry& e = entries[i];
      ImGui::PushID(static_cast<int>(i));
      ImGui::TableNextRow();
      ImGui::TableSetColumnIndex(0);
      // Choosing an entry is picking a search result: the same call, the same listing.
      if (ImGui::Selectable(e.family.c_str(), e.repo == hub.repo(), ImGuiSelectableFlags_SpanAllColumns)) {
        hub.select_repo(e.repo);
      }
      ui::tooltip(fmt::format("{}\n{}\n{}{}", e.repo, e.note, e.architecture, e.gguf ? " (GGUF files)" : ""));
      ImGui::TableSetColumnIndex(1);
      ImGui::TextUnformatted(e.repo.c_str());
      ImGui::TableSetColumnIndex(2);
      ImGui::TextUnformatted(e.note.c_str());
      ImGui::PopID();
    }
    ImGui::EndTable();
  }
  ImGui::TreePop();
}

void ModelsPanel::draw_repo() {
  HubSession& hub = *ctx_.hub;
  if (hub.repo().empty()) return;
  ImGui::Spacing();
  ImGui::Text("Repository: %s", hub.repo().c_str());
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Revision");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 10);
  if (ImGui::BeginCombo("##rev", hub.revision().c_str())) {
    for (const auto& r : hub.refs()) {
      const char* kind = r.kind == HubRef::Kind::Branch ? "branch" : (r.kind == HubRef::Kind::Tag ? "tag" : "commit");
      std::string label = fmt::format("{}  ({})", r.name, kind);
      if (ImGui::Selectable(label.c_str(), r.name == hub.revision())) hub.select_revision(r.name);
    }
    ImGui::EndCombo();
  }
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 10);
  ImGui::InputTextWithHint("##commit", "or a commit sha", &commit_);
  ImGui::SameLine();
  if (ui::button("List files", !commit_.empty())) hub.select_revision(commit_);
  if (hub.listing()) ImGui::TextDisabled("listing...");
  if (!hub.list_error().empty()) ui::text_colored_wrapped(ui::kRed, hub.list_error());

  if (hub.files().empty()) return;
  if (!hub.gguf_files().empty()) {
    // GGUF repos: pick one quantization; its file (all parts) becomes the download.
    ImGui::TextUnformatted("GGUF model files (one is downloaded):");
    for (size_t i = 0; i < hub.gguf_files().size(); ++i) {
      const GgufChoice& g = hub.gguf_files()[i];
      const std::string label =
          fmt::format("{:<8} {:>10}  {}{}##gguf{}", g.quant.empty() ? "?" : g.quant, format_bytes(g.size), g.path,
                      g.parts > 1 ? fmt::format(" ({} parts)", g.parts) : "", i);
      if (ImGui::RadioButton(label.c_str(), hub.gguf_pick() == static_cast<int>(i))) hub.pick_gguf(static_cast<int>(i));
    }
  }
  const float h = ImGui::GetTextLineHeightWithSpacing() * std::min<float>(10.5f, hub.files().size() + 1.5f);
  if (ImGui::BeginTable("files", 2, ImGuiTableFlags_ScrollY | ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersOuter,
                        ImVec2(0, h))) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("File", ImGuiTableColumnFlags_WidthStretch);
    ImGui::TableSetupColumn("Size", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 6);
    ImGui::TableHeadersRow();
    for (const auto& f : hub.files()) {
      ImGui::TableNextRow();
      ImGui::TableSetColumnIndex(0);
      bool on = hub.chosen().count(f.path) > 0;
      ImGui::PushID(f.path.c_str());
      if (ImGui::Checkbox(f.path.c_str(), &on)) {
        if (on) {
          hub.chosen().insert(f.path);
        } else {
          hub.chosen().erase(f.path);
        }
      }
      ImGui::PopID();
      ImGui::TableSetColumnIndex(1);
      ImGui::TextUnformatted(format_bytes(f.size).c_str());
    }
    ImGui::EndTable();
  }
  ImGui::Text("%zu files chosen, %s", hub.chosen().size(), format_bytes(hub.chosen_bytes()).c_str());
}

void ModelsPanel::draw_download() {
  HubSession& hub = *ctx_.hub;
  if (hub.repo().empty() && !hub.downloading()) return;
  if (!hub.downloading()) {
    if (ui::button("Download", !hub.chosen().empty() && !hub.listing())) hub.download();
  } else {
    if (ImGui::Button("Cancel download")) hub.cancel_download();
  }
  const DownloadProgress& p = hub.progress();
  if (hub.downloading() || !p.files().empty()) {
    std::string rate = format_bytes(static_cast<int64_t>(p.rate_bytes_per_s())) + "/s";
    auto eta = p.eta_seconds();
    std::string overlay =
        fmt::format("{} of {}   {}   ETA {}", format_bytes(p.bytes_done()), format_bytes(p.bytes_total()), rate,
                    eta ? format_duration(*eta) : std::string("?"));
    ImGui::ProgressBar(p.fraction(), ImVec2(-1, 0), overlay.c_str());
    if (hub.downloading()) {
      for (const auto& f : p.files()) {
        ImGui::ProgressBar(f.fraction(), ImVec2(ImGui::GetFontSize() * 8, 0));
        ImGui::SameLine();
        ImGui::Text("%s  %s", f.path.c_str(), format_bytes(f.total).c_str());
      }
    }
  }
  if (!hub.download_error().empty()) ui::text_colored_wrapped(ui::kRed, hub.download_error());
  if (!hub.downloaded_path().empty()) {
    ui::text_colored_wrapped(ui::kGreen, "Downloaded to " + hub.downloaded_path());
    if (ImGui::Button("Use this model")) ctx_.use_model(hub.downloaded_path());
  }
}

void ModelsPanel::draw_cache() {
  HubSession& hub = *ctx_.hub;
  ImGui::TextUnformatted("Downloaded models (Hugging Face cache)");
  ImGui::SameLine();
  if (ImGui::SmallButton("Refresh")) {
    hub.refresh_cache();
    cache_labels_.clear();
  }
  if (!hub.cache_error().empty()) ui::text_colored_wrapped(ui::kRed, hub.cache_error());
  if (hub.cache().empty()) {
    ImGui::TextDisabled("none yet");
    return;
  }
  if (ImGui::BeginTable("cache", 5, ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersOuter)) {
    ImGui::TableSetupColumn("Repository", ImGuiTableColumnFlags_WidthStretch);
    ImGui::TableSetupColumn("Revision", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 6);
    ImGui::TableSetupColumn("Weights", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 8);
    ImGui::TableSetupColumn("Size", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 5);
    ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 7);
    ImGui::TableHeadersRow();
    for (const auto& c : hub.cache()) {
      const std::string id = c.repo + "@" + c.revision;
      ImGui::PushID(id.c_str());
      ImGui::TableNextRow();
      ImGui::TableSetColumnIndex(0);
      ImGui::TextUnformatted(c.repo.c_str());
      ui::tooltip(c.path);
      ImGui::TableSetColumnIndex(1);
      ImGui::TextUnformatted(c.revision.substr(0, 12).c_str());
      ImGui::TableSetColumnIndex(2);
      auto label = cache_labels_.find(c.path);
      if (label == cache_labels_.end()) label = cache_labels_.emplace(c.path, folder_weight_label(c.path)).first;
      ImGui::TextUnformatted(label->second.c_str());
      ui::tooltip(label->second);
      ImGui::TableSetColumnIndex(3);
      ImGui::TextUnformatted(format_bytes(c.size_bytes).c_str());
      ImGui::TableSetColumnIndex(4);
      if (ImGui::SmallButton("Use")) ctx_.use_model(c.path);
      ImGui::SameLine();
      if (confirm_delete_ == id) {
        if (ImGui::SmallButton("Sure?")) {
          hub.delete_cached(c.repo, c.revision);
          confirm_delete_.clear();
        }
      } else if (ImGui::SmallButton("Delete")) {
        confirm_delete_ = id;
      }
      ImGui::PopID();
    }
    ImGui::EndTable();
  }
}

void ModelsPanel::draw_local() {
  AppSettings& s = *ctx_.settings;
  ImGui::TextUnformatted("Local model folder");
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 18);
  ImGui::InputTextWithHint("##local", "/path/to/model (config.json + weights)", &local_path_);
  ImGui::SameLine();
  std::error_code ec;
  const bool exists = !local_path_.empty() && std::filesystem::is_directory(local_path_, ec);
  if (ui::button("Use folder", exists)) {
    if (std::find(s.local_folders.begin(), s.local_folders.end(), local_path_) == s.local_folders.end()) {
      s.local_folders.push_back(local_path_);
      ctx_.save_settings();
    }
    ctx_.use_model(local_path_);
  }
  if (!local_path_.empty() && !exists) ui::text_colored_wrapped(ui::kYellow, "no such folder");
  for (size_t i = 0; i < s.local_folders.size(); ++i) {
    ImGui::PushID(static_cast<int>(i));
    if (ImGui::SmallButton("Use")) ctx_.use_model(s.local_folders[i]);
    ImGui::SameLine();
    if (ImGui::SmallButton("Forget")) {
      s.local_folders.erase(s.local_folders.begin() + static_cast<std::ptrdiff_t>(i));
      ctx_.save_settings();
      ImGui::PopID();
      break;
    }
    ImGui::SameLine();
    ImGui::TextUnformatted(s.local_folders[i].c_str());
    ImGui::PopID();
  }
}

void ModelsPanel::draw_adapters() {
  ImGui::TextUnformatted("Adapters (LoRA)");
  LoraSession& lora = *ctx_.lora;
  const auto& engine = ctx_.engine->engine();
  lora.refresh(engine);
  if (!ctx_.engine->loaded()) {
    ImGui::TextDisabled("Load a model (with --enable-lora) to add adapters.");
    return;
  }
  if (!lora.enabled()) {
    ImGui::TextDisabled("This model was loaded without --enable-lora (Engine options → Advanced → LoRA):");
    ImGui::TextDisabled("turn it on, set --max-loras / --max-lora-rank, and load the model again.");
    return;
  }
  ImGui::SetNextItemWidth(-ImGui::GetFontSize() * 12);
  ImGui::InputTextWithHint("##lora_path", "adapter folder (adapter_config.json + adapter_model.safetensors)",
                           &adapter_path_);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7);
  ImGui::InputTextWithHint("##lora_name", "name", &adapter_name_);
  ImGui::SameLine();
  if (ui::button("Load##lora", !adapter_path_.empty() && !lora.busy())) {
    if (lora.load(engine, adapter_name_, adapter_path_)) adapter_name_.clear();
  }
  if (lora.busy()) ImGui::TextDisabled("working...");
  if (!lora.error().empty()) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextColored(ImVec4(1.0f, 0.45f, 0.4f, 1.0f), "%s", lora.error().c_str());
    ImGui::PopTextWrapPos();
  } else if (!lora.message().empty()) {
    ImGui::TextDisabled("%s", lora.message().c_str());
  }
  if (lora.adapters().empty()) {
    ImGui::TextDisabled("No adapter loaded: chats run on the base model.");
    return;
  }
  if (ImGui::BeginTable("adapters", 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersOuter)) {
    ImGui::TableSetupColumn("name");
    ImGui::TableSetupColumn("rank", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableSetupColumn("folder");
    ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableHeadersRow();
    std::string unload;
    for (const auto& a : lora.adapters()) {
      ImGui::PushID(a.name.c_str());
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(a.name.c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%lld", static_cast<long long>(a.rank));
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(a.path.c_str());
      ImGui::TableNextColumn();
      if (ui::button("Unload", !lora.busy())) unload = a.name;
      ImGui::PopID();
    }
    ImGui::EndTable();
    if (!unload.empty()) lora.unload(engine, unload);
  }
}

}  // namespace cypris
