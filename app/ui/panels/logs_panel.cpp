// The Logs panel; see logs_panel.h.
#include "app/ui/panels/logs_panel.h"

#include <GLFW/glfw3.h>
#include <imgui.h>

#include <string>

#include "app/ui/widgets.h"

namespace cypris {

void LogsPanel::draw() {
  if (!header()) return;
  ImGui::PushID("logs");
  static const char* kLevels[] = {"trace", "debug", "info", "warning", "error", "critical"};
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7);
  ImGui::Combo("Level", &level_, kLevels, 6);
  ImGui::SameLine();
  ImGui::Checkbox("Follow", &follow_);
  ImGui::SameLine();
  if (ImGui::SmallButton("Clear")) ctx_.log->clear();
  const auto lines = ctx_.log->lines(static_cast<LogLevel>(level_), 2000);
  ImGui::SameLine();
  if (ImGui::SmallButton("Copy") && ctx_.window) {
    std::string all;
    for (const auto& l : lines) all += l.time + " " + log_level_name(l.level) + " " + l.text + "\n";
    glfwSetClipboardString(ctx_.window, all.c_str());
  }
  ImGui::BeginChild("loglines", ImVec2(0, ImGui::GetTextLineHeightWithSpacing() * 12), true,
                    ImGuiWindowFlags_HorizontalScrollbar);
  for (const auto& l : lines) {
    ImVec4 c = ImGui::GetStyleColorVec4(ImGuiCol_Text);
    if (l.level >= LogLevel::Error)
      c = ui::kRed;
    else if (l.level == LogLevel::Warn)
      c = ui::kYellow;
    else if (l.level <= LogLevel::Debug)
      c = ui::kGrey;
    ImGui::TextColored(c, "%s %-7s %s", l.time.c_str(), log_level_name(l.level), l.text.c_str());
  }
  if (follow_) ImGui::SetScrollHereY(1.0f);
  ImGui::EndChild();
  ImGui::PopID();
}

}  // namespace cypris
