// The Server panel; see server_panel.h.
#include "app/ui/panels/server_panel.h"

#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_stdlib.h>

#include "app/ui/widgets.h"

namespace cypris {

ServerSwitch ServerPanel::current() const {
  const AppSettings& s = *ctx_.settings;
  ServerSwitch sw;
  sw.host = s.server_host;
  sw.port = s.server_port;
  sw.api_key = s.server_api_key;
  sw.kobold = s.server_kobold;
  return sw;
}

void ServerPanel::start() {
  ctx_.server->start(ctx_.engine->loaded_config(), current(), ctx_.engine->engine());
}

void ServerPanel::stop() {
  ctx_.server->stop();
}

void ServerPanel::draw() {
  if (!header()) return;
  ServerSession& server = *ctx_.server;
  AppSettings& s = *ctx_.settings;
  ImGui::PushID("server");
  const bool off = server.status() == ServerSession::Status::Off;
  ImGui::BeginDisabled(!off);
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 10);
  if (ImGui::InputText("Host", &s.server_host)) ctx_.save_settings();
  ui::tooltip("localhost: only this computer. 0.0.0.0: every computer on your network can connect.");
  int port = static_cast<int>(s.server_port);
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 10);
  if (ImGui::InputInt("Port", &port, 0, 0)) {
    s.server_port = port;
    ctx_.save_settings();
  }
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 10);
  if (ImGui::InputText("API key", &s.server_api_key, show_key_ ? 0 : ImGuiInputTextFlags_Password)) {
    ctx_.save_settings();
  }
  ui::tooltip("Optional. Clients must send it as 'Authorization: Bearer KEY'. Empty: no key.");
  ImGui::SameLine();
  ImGui::Checkbox("show", &show_key_);
  if (ImGui::Checkbox("Kobold API too", &s.server_kobold)) ctx_.save_settings();
  ui::tooltip("Also serve the KoboldAI API (/api/v1/...) for Kobold clients.");
  ImGui::EndDisabled();

  switch (server.status()) {
    case ServerSession::Status::Off:
      if (ui::button("Start API server", ctx_.engine->loaded())) start();
      if (!ctx_.engine->loaded()) {
        ImGui::SameLine();
        ImGui::TextDisabled("load a model first");
      }
      break;
    case ServerSession::Status::Starting:
      ImGui::TextDisabled("starting...");
      break;
    case ServerSession::Status::Stopping:
      ImGui::TextDisabled("stopping...");
      break;
    case ServerSession::Status::On:
      if (ImGui::Button("Stop API server")) stop();
      ImGui::SameLine();
      ImGui::TextColored(ui::kGreen, "running");
      break;
  }
  if (!server.error().empty()) ui::text_colored_wrapped(ui::kRed, server.error());

  const ServerSwitch sw = server.status() == ServerSession::Status::Off ? current() : server.active();
  ImGui::Spacing();
  ImGui::PushTextWrapPos(0.0f);
  ImGui::TextUnformatted(
      "In SillyTavern: API Connections > Chat Completion > Custom (OpenAI-compatible), and paste this as the "
      "Custom Endpoint (Base URL):");
  ImGui::PopTextWrapPos();
  const std::string url = openai_base_url(sw);
  ImGui::TextColored(ImVec4(0.55f, 0.75f, 1.0f, 1.0f), "%s", url.c_str());
  ImGui::SameLine();
  if (ImGui::SmallButton("Copy##openai") && ctx_.window) glfwSetClipboardString(ctx_.window, url.c_str());
  if (sw.kobold) {
    const std::string kurl = kobold_base_url(sw);
    ImGui::TextUnformatted("Kobold API URL:");
    ImGui::SameLine();
    ImGui::TextColored(ImVec4(0.55f, 0.75f, 1.0f, 1.0f), "%s", kurl.c_str());
    ImGui::SameLine();
    if (ImGui::SmallButton("Copy##kobold") && ctx_.window) glfwSetClipboardString(ctx_.window, kurl.c_str());
  }

  ImGui::Spacing();
  ImGui::TextUnformatted("Requests");
  ImGui::SameLine();
  if (ImGui::SmallButton("Clear")) server.clear_log();
  ImGui::BeginChild("reqlog", ImVec2(0, ImGui::GetTextLineHeightWithSpacing() * 6), true);
  for (const auto& line : server.log()) ImGui::TextUnformatted(line.c_str());
  if (ImGui::GetScrollY() >= ImGui::GetScrollMaxY() - 4.0f) ImGui::SetScrollHereY(1.0f);
  ImGui::EndChild();
  ImGui::PopID();
}

}  // namespace cypris
