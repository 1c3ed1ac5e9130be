// --cpu-offload-gb's plan (engine/backend/weight_offload_plan.h): which decoder layers of a GPU keep
// their weights in pinned host memory, and the staging slots that stream them.
#include "engine/backend/weight_offload_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/common/error.h"

namespace cypris {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr double kMiBInGiB = 1.0 / 1024.0;

std::string error_of(double gib, const std::vector<int64_t>& layers) {
  try {
    plan_weight_offload(gib, layers);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(WeightOffloadPlan, TakesTheFewestLastLayersThatCoverTheGiBAsked) {
  const std::vector<int64_t> layers(8, 100 * kMiB);
  // 250 MiB: three layers of 100 MiB (two hold only 200).
  WeightOffloadPlan p = plan_weight_offload(250 * kMiBInGiB, layers);
  EXPECT_EQ(p.first_layer, 5);
  EXPECT_EQ(p.end_layer, 8);
  EXPECT_EQ(p.num_layers(), 3);
  EXPECT_EQ(p.offloaded_bytes, 300 * kMiB);
  EXPECT_FALSE(p.offloaded(4));
  EXPECT_TRUE(p.offloaded(5));
  EXPECT_TRUE(p.offloaded(7));
  EXPECT_FALSE(p.offloaded(8));
  // Exactly two layers' bytes: two layers.
  p = plan_weight_offload(200 * kMiBInGiB, layers);
  EXPECT_EQ(p.num_layers(), 2);
  EXPECT_EQ(p.first_layer, 6);
}

TEST(WeightOffloadPlan, ZeroOffloadsNothing) {
  const WeightOffloadPlan p = plan_weight_offload(0, std::vector<int64_t>(4, kMiB));
  EXPECT_TRUE(p.empty());
  EXPECT_EQ(p.offloaded_bytes, 0);
  EXPECT_EQ(p.staging_bytes(), 0);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(p.offloaded(i));
}

TEST(WeightOffloadPlan, MoreThanTheModelOffloadsEveryLayerAndSaysSo) {
  const std::vector<int64_t> layers(4, 100 * kMiB);
  const WeightOffloadPlan p = plan_weight_offload(64, layers);
  EXPECT_EQ(p.first_layer, 0);
  EXPECT_EQ(p.end_layer, 4);
  EXPECT_EQ(p.offloaded_bytes, 400 * kMiB);
  EXPECT_THAT(describe_weight_offload(64, p, 4), HasSubstr("all of the GPU's layers"));
  // Covering exactly the model's bytes is not "less than asked".
  const WeightOffloadPlan exact = plan_weight_offload(400 * kMiBInGiB, layers);
  EXPECT_EQ(exact.num_layers(), 4);
  EXPECT_THAT(describe_weight_offload(400 * kMiBInGiB, exact, 4), ::testing::Not(HasSubstr("all of the GPU's")));
}

TEST(WeightOffloadPlan, StagingIsTwoSlotsOfTheLargestOffloadedLayer) {
  // Layers of different sizes (a Q4_K_M file's layers differ): the slot holds the largest offloaded.
  const std::vector<int64_t> layers = {500 * kMiB, 90 * kMiB, 120 * kMiB, 100 * kMiB};
  const WeightOffloadPlan p = plan_weight_offload(200 * kMiBInGiB, layers);
  EXPECT_EQ(p.first_layer, 2);
  EXPECT_EQ(p.slot_bytes, 120 * kMiB);  // not the resident 500 MiB layer
  EXPECT_EQ(p.staging_slots(), 2);
  EXPECT_GE(p.slot_capacity(), 120 * kMiB);
  EXPECT_EQ(p.staging_bytes(), 2 * p.slot_capacity());
  EXPECT_EQ(p.gpu_bytes_saved(), 220 * kMiB - p.staging_bytes());
  // One offloaded layer needs one slot (nothing to overlap its copy with but the resident layers).
  const WeightOffloadPlan one = plan_weight_offload(50 * kMiBInGiB, layers);
  EXPECT_EQ(one.num_layers(), 1);
  EXPECT_EQ(one.staging_slots(), 1);
  EXPECT_LT(one.gpu_bytes_saved(), 0);  // its slot costs about what it frees
}

TEST(WeightOffloadPlan, CountsLayersOfTheGpuStage) {
  // --gpu-layers / -pp: a GPU holding layers [10, 14) offloads its own last layers.
  const WeightOffloadPlan p = plan_weight_offload(150 * kMiBInGiB, std::vector<int64_t>(4, 100 * kMiB), 10);
  EXPECT_EQ(p.first_layer, 12);
  EXPECT_EQ(p.end_layer, 14);
  const WeightOffloadPlan none = plan_weight_offload(0, std::vector<int64_t>(4, 100 * kMiB), 10);
  EXPECT_TRUE(none.empty());
  EXPECT_FALSE(none.offloaded(13));
}

TEST(WeightOffloadPlan, RefusesNegativeAndNonFiniteValuesNamingTheFlag) {
  const std::vector<int64_t> layers(2, kMiB);
  for (double bad : {-1.0, -1e-9, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    const std::string e = error_of(bad, layers);
    EXPECT_THAT(e, HasSubstr("--cpu-offload-gb")) << bad;
    EXPECT_THAT(e, HasSubstr(">= 0")) << bad;
  }
  EXPECT_EQ(error_of(0.5, layers), "");
}

TEST(WeightOffloadPlan, TheLogLineSaysWhatMovedWhere) {
  const WeightOffloadPlan p = plan_weight_offload(1.5, std::vector<int64_t>(32, 512 * kMiB));
  const std::string line = describe_weight_offload(1.5, p, 32);
  EXPECT_THAT(line, HasSubstr("layers 29..31 (3 of 32)"));
  EXPECT_THAT(line, HasSubstr("1.50 GiB of weights in pinned host memory"));
  EXPECT_THAT(line, HasSubstr("2 slots"));
}

}  // namespace
}  // namespace cypris
