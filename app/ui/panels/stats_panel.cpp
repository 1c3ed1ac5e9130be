// The Stats panel; see stats_panel.h.
#include "app/ui/panels/stats_panel.h"

#include <fmt/format.h>
#include <imgui.h>

#include <algorithm>

namespace cypris {

namespace {

void plot(const char* label, const RingSeries& r, const std::string& overlay, float max_hint) {
  const float h = ImGui::GetTextLineHeight() * 3.5f;
  float top = std::max(max_hint, r.max() * 1.1f);
  ImGui::PlotLines(label, r.data(), r.plot_count(), r.plot_offset(), overlay.c_str(), 0.0f, top > 0 ? top : 1.0f,
                   ImVec2(ImGui::GetContentRegionAvail().x * 0.7f, h));
}

}  // namespace

void StatsPanel::draw() {
  if (!header()) return;
  ImGui::PushID("stats");
  const EngineSession& engine = *ctx_.engine;
  if (!engine.loaded()) {
    ImGui::TextDisabled("Load a model to see its statistics.");
    ImGui::PopID();
    return;
  }
  const StatsHistory& h = engine.history();
  const EngineStats& s = h.latest();
  std::string kv = fmt::format("KV cache {:.1f}%", s.kv_cache_usage * 100.0);
  ImGui::ProgressBar(static_cast<float>(s.kv_cache_usage), ImVec2(-1, 0), kv.c_str());
  ImGui::Text("Running %lld   Waiting %lld   Swapped %lld   Prefix cache hits %.0f%%",
              static_cast<long long>(s.num_running), static_cast<long long>(s.num_waiting),
              static_cast<long long>(s.num_swapped), s.prefix_cache_hit_rate * 100.0);
  ImGui::Text("Tokens so far: prompt %lld, generated %lld", static_cast<long long>(s.prompt_tokens_total),
              static_cast<long long>(s.generation_tokens_total));
  plot("KV cache %", h.kv_usage, fmt::format("{:.1f}%", h.kv_usage.latest()), 100.0f);
  plot("Generation tok/s", h.gen_throughput, fmt::format("{:.1f}", h.gen_throughput.latest()), 1.0f);
  plot("Prompt tok/s", h.prompt_throughput, fmt::format("{:.1f}", h.prompt_throughput.latest()), 1.0f);
  plot("Running", h.running, fmt::format("{:.0f}", h.running.latest()), 1.0f);
  plot("Waiting", h.waiting, fmt::format("{:.0f}", h.waiting.latest()), 1.0f);
  ImGui::PopID();
}

}  // namespace cypris
