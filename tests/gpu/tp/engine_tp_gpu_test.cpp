// The engine with -tp 2 on GPUs (ctest label `gpu`): the greedy story of stories260k, as on one
// GPU and on CPU ranks. Skips with fewer than 2 GPUs, and while the build has no CUDA backend.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"
#include "tests/support/engine_jobs.h"
#ifdef CYPRIS_HAVE_CUDA
#include "engine/backend/cuda/nccl_communicator.h"
#endif

namespace cypris {
namespace {

TEST(EngineTpGpu, StoriesGreedyTextWithTwoGpus) {
#ifndef CYPRIS_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (visible_cuda_devices() < 2) GTEST_SKIP() << "needs 2 GPUs, " << visible_cuda_devices() << " visible";
  const std::string model = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
  EngineConfig cfg;
  cfg.model.model = model;
  cfg.model.dtype = "float32";
  cfg.device.device = "cuda";
  cfg.parallel.tensor_parallel_size = 2;
  cfg.logging.disable_log_stats = true;
  cfg.logging.disable_log_requests = true;
  std::unique_ptr<Engine> engine;
  try {
    engine = std::make_unique<Engine>(cfg);
  } catch (const Error& e) {
    if (std::string(e.what()).find("CUDA backend is not supported yet") != std::string::npos) {
      GTEST_SKIP() << "this build has no CUDA backend yet: " << e.what();
    }
    throw;
  }
  EXPECT_EQ(testing_support::greedy_story(*engine), testing_support::expected_greedy_story());
#endif
}

}  // namespace
}  // namespace cypris
