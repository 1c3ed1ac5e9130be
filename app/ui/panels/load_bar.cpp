// The load bar; see load_bar.h.
#include "app/ui/panels/load_bar.h"

#include <fmt/format.h>
#include <imgui.h>

#include "app/ui/widgets.h"

namespace cypris {

void LoadBar::draw() {
  EngineSession& engine = *ctx_.engine;
  const std::string& model = ctx_.options->config().model.model;
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("Model:");
  ImGui::SameLine();
  switch (engine.status()) {
    case EngineSession::Status::Loaded: {
      const auto& info = engine.model_info();
      ImGui::TextColored(ui::kGreen, "%s", info.model.c_str());
      if (!info.device.empty()) {
        ImGui::SameLine();
        ImGui::TextDisabled("(%s, %s, context %lld)", info.device.c_str(), info.dtype.c_str(),
                            static_cast<long long>(info.max_model_len));
      }
      ImGui::SameLine();
      if (ImGui::Button("Unload")) engine.unload();
      ImGui::SameLine();
      if (ui::button("Reload with current options", ctx_.options->validate().ok)) ctx_.load_model();
      break;
    }
    case EngineSession::Status::Loading: {
      ImGui::TextUnformatted(model.c_str());
      ImGui::SameLine();
      const auto& p = engine.progress();
      std::string overlay = fmt::format("{} {:.0f}%", p.stage, p.fraction * 100.0);
      ImGui::ProgressBar(static_cast<float>(p.fraction), ImVec2(ImGui::GetFontSize() * 18, 0), overlay.c_str());
      ImGui::SameLine();
      if (ImGui::Button("Cancel")) engine.cancel_load();
      break;
    }
    case EngineSession::Status::Unloaded:
    case EngineSession::Status::Failed: {
      if (model.empty()) {
        ImGui::TextDisabled("none chosen: pick one in Models, or type --model in Engine options");
      } else {
        ImGui::TextUnformatted(model.c_str());
      }
      ImGui::SameLine();
      const auto& v = ctx_.options->validate();
      if (ui::button("Load", v.ok)) ctx_.load_model();
      if (!v.ok) ui::tooltip(v.error);
      break;
    }
  }
  if (engine.status() == EngineSession::Status::Failed) {
    ui::text_colored_wrapped(ui::kRed, "Load failed: " + engine.error());
  }
}

}  // namespace cypris
