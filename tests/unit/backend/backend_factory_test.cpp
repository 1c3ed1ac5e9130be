// --device resolution: cpu always works; cuda is refused with a clear message when the build has
// no CUDA or the machine has no GPU; auto falls back to the CPU there. CPU block moves.
#include "engine/backend/backend_factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/backend/cpu/cpu_backend.h"

namespace cypris {
namespace {

using ::testing::HasSubstr;

TEST(BackendFactory, CpuAlwaysAndAutoFallsBackWithoutGpu) {
  EXPECT_EQ(resolve_device("cpu"), "cpu");
  EXPECT_EQ(make_backend({})->name(), "cpu");
  const bool gpu = cuda_compiled() && cuda_device_count() > 0;
  EXPECT_EQ(resolve_device("auto"), gpu ? "cuda" : "cpu");
  EXPECT_EQ(resolve_device("neuron"), resolve_device("auto"));
  if (!gpu) {
    try {
      resolve_device("cuda");
      ADD_FAILURE() << "--device cuda must be refused without a GPU";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("--device cuda"));
      EXPECT_THAT(e.what(), HasSubstr("--device cpu"));
    }
  }
  try {
    resolve_device("metal");
    ADD_FAILURE() << "unknown devices must be refused";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("auto, cuda and cpu"));
  }
}

TEST(CpuBackendBlocks, CopyAndSwapMoveWholeBlocks) {
  CpuBackend be(1);
  std::vector<float> data(5 * 6);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  DeviceTensor cache = be.upload(data.data(), DType::F32, {5, 2, 3});
  be.copy_blocks({cache.view}, {0, 4, 2, 1});
  const float* c = cache.view.as<float>();
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(c[4 * 6 + i], data[0 * 6 + i]);
    EXPECT_EQ(c[1 * 6 + i], data[2 * 6 + i]);
    EXPECT_EQ(c[3 * 6 + i], data[3 * 6 + i]);  // untouched
  }
  DeviceTensor pool = be.empty_host(DType::F32, {2, 2, 3});
  be.swap_blocks(cache.view, pool.view, {3, 1});
  be.swap_blocks(pool.view, cache.view, {1, 0});
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c[0 * 6 + i], data[3 * 6 + i]);
}

}  // namespace
}  // namespace cypris
