#include "engine/backend/weight_offload_plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/common/error.h"

namespace cypris {

WeightOffloadPlan plan_weight_offload(double gib, const std::vector<int64_t>& layer_bytes, int first_layer) {
  CYPRIS_CHECK(std::isfinite(gib) && gib >= 0, "--cpu-offload-gb {}: must be a number of GiB >= 0", gib);
  const int n = static_cast<int>(layer_bytes.size());
  WeightOffloadPlan plan;
  plan.first_layer = plan.end_layer = first_layer + n;
  if (gib == 0 || n == 0) return plan;
  const double want = gib * 1024.0 * 1024.0 * 1024.0;
  while (plan.first_layer > first_layer && static_cast<double>(plan.offloaded_bytes) < want) {
    --plan.first_layer;
    const int64_t b = layer_bytes[static_cast<size_t>(plan.first_layer - first_layer)];
    CYPRIS_CHECK(b >= 0, "--cpu-offload-gb: layer {} has a negative size ({} bytes)", plan.first_layer, b);
    plan.offloaded_bytes += b;
    plan.slot_bytes = std::max(plan.slot_bytes, b);
  }
  return plan;
}

std::string describe_weight_offload(double gib, const WeightOffloadPlan& plan, int gpu_layers) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  if (plan.empty()) return fmt::format("--cpu-offload-gb {}: no layer offloaded", gib);
  const bool all = plan.num_layers() >= gpu_layers;
  return fmt::format(
      "--cpu-offload-gb {}: layers {}..{} ({} of {}{}), {:.2f} GiB of weights in pinned host memory, streamed to the "
      "GPU each step; {:.2f} GiB of staging on the GPU ({} slot{} of {:.0f} MiB), {:.2f} GiB less on the GPU",
      gib, plan.first_layer, plan.end_layer - 1, plan.num_layers(), gpu_layers,
      all && static_cast<double>(plan.offloaded_bytes) < gib * kGiB
          ? fmt::format(": all of the GPU's layers, which hold less than {} GiB", gib)
          : "",
      static_cast<double>(plan.offloaded_bytes) / kGiB, static_cast<double>(plan.staging_bytes()) / kGiB,
      plan.staging_slots(), plan.staging_slots() == 1 ? "" : "s",
      static_cast<double>(plan.slot_capacity()) / (1024.0 * 1024.0), static_cast<double>(plan.gpu_bytes_saved()) / kGiB);
}

}  // namespace cypris
