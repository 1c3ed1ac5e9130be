// The NCCL communicator between GPU ranks (ctest label `gpu`): sums and gathers across the
// visible GPUs from one worker thread per rank, and a clear error when -tp asks for more GPUs
// than are visible. Skips without GPUs (or without the CUDA build).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#ifdef CYPRIS_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/common/error.h"
#include "engine/backend/cuda/nccl_communicator.h"
#include "engine/backend/tp_workers.h"
#endif

namespace cypris {
namespace {

#ifdef CYPRIS_HAVE_CUDA

TEST(NcclCommunicator, MoreRanksThanGpusIsAClearError) {
  const int visible = visible_cuda_devices();
  try {
    make_tp_workers(Device::Cuda, visible + 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--tensor-parallel-size " + std::to_string(visible + 1) + " needs"));
  }
}

TEST(NcclCommunicator, AllReduceAndAllGatherAcrossGpus) {
  const int world = std::min(visible_cuda_devices(), 4);
  if (world < 2) GTEST_SKIP() << "needs at least 2 GPUs, " << visible_cuda_devices() << " visible";
  auto workers = make_tp_workers(Device::Cuda, world);
  constexpr int kCount = 1000;
  std::vector<std::vector<float>> reduced(world), gathered(world);
  workers->run([&](int rank) {
    int device = -1;
    cudaGetDevice(&device);
    ASSERT_EQ(device, rank);  // each rank's thread is bound to its GPU
    std::vector<float> host(kCount);
    for (int i = 0; i < kCount; ++i) host[i] = static_cast<float>(rank * 1000 + i);
    float *data = nullptr, *all = nullptr;
    ASSERT_EQ(cudaMalloc(&data, kCount * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&all, world * kCount * sizeof(float)), cudaSuccess);
    cudaMemcpy(data, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice);
    workers->comm(rank).all_gather(data, all, kCount);
    workers->comm(rank).all_reduce_sum(data, kCount);
    workers->comm(rank).barrier();
    reduced[rank].resize(kCount);
    gathered[rank].resize(world * kCount);
    cudaMemcpy(reduced[rank].data(), data, kCount * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(gathered[rank].data(), all, world * kCount * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(data);
    cudaFree(all);
  });
  for (int r = 0; r < world; ++r) {
    for (int i = 0; i < kCount; ++i) {
      float expected = 0;
      for (int k = 0; k < world; ++k) expected += static_cast<float>(k * 1000 + i);
      ASSERT_EQ(reduced[r][i], expected) << "rank " << r << " element " << i;
      for (int k = 0; k < world; ++k) ASSERT_EQ(gathered[r][k * kCount + i], static_cast<float>(k * 1000 + i));
    }
  }
}

#else

TEST(NcclCommunicator, NeedsTheCudaBuild) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace
}  // namespace cypris
