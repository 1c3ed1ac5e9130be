// The first CUDA device's memory as the desktop app's Quick options view reads it before loading
// (engine/core/memory_estimate.h through backend_factory.h's cuda_device_memory): a name, a total
// the size of a real card, and free memory that drops when memory is taken.
#include <gtest/gtest.h>

#include "engine/backend/backend_factory.h"
#include "engine/core/memory_estimate.h"
#include "tests/gpu/cuda/gpu_test_util.h"

namespace cypris {
namespace {

TEST(CudaDeviceMemory, NameTotalAndFreeOfTheFirstDevice) {
  CYPRIS_REQUIRE_GPU();
  const auto before = cuda_device_memory(0);
  ASSERT_TRUE(before.has_value());
  EXPECT_FALSE(before->name.empty());
  EXPECT_GT(before->total_bytes, size_t{1} << 30);
  EXPECT_GT(before->free_bytes, 0u);
  EXPECT_LE(before->free_bytes, before->total_bytes);
  EXPECT_FALSE(cuda_device_memory(cuda_device_count()).has_value());  // no such device
  EXPECT_FALSE(cuda_device_memory(-1).has_value());

  // 1 GiB taken on the device shows as at least that much less free memory.
  BackendOptions options;
  options.device = "cuda";
  auto backend = make_backend(options);
  DeviceTensor t = backend->empty(DType::U8, {int64_t{1} << 30});
  const auto after = cuda_device_memory(0);
  ASSERT_TRUE(after.has_value());
  EXPECT_LE(after->free_bytes + (size_t{1} << 30), before->free_bytes);

  const MachineMemory m = read_machine_memory(true);
  ASSERT_TRUE(m.gpu.has_value());
  EXPECT_EQ(m.gpu->name, before->name);
  EXPECT_EQ(m.gpu->total_bytes, static_cast<int64_t>(before->total_bytes));
}

TEST(CudaDeviceMemory, NoneWithoutAGpu) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_FALSE(cuda_device_memory(0).has_value());
  EXPECT_FALSE(read_machine_memory(true).gpu.has_value());
}

}  // namespace
}  // namespace cypris
