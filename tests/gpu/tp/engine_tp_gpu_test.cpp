// The engine with -tp 2 on GPUs (ctest label `gpu`): the greedy story of stories260k, as on one
// GPU and on CPU ranks. Skips with fewer than 2 GPUs, and while the build has no CUDA backend.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"
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
  auto p = std::make_shared<SamplingParams>();
  p->temperature = 0.0f;
  p->max_tokens = 200;
  p->ignore_eos = true;
  auto stream = std::make_shared<RequestStream>("s");
  engine->add_request(GenerateRequest{"s", {1}, "", p, 0}, stream);
  while (engine->has_unfinished_requests()) engine->step();
  std::string text;
  while (auto o = stream->next(std::chrono::milliseconds(0))) {
    for (const auto& d : o->outputs) text += d.text;
  }
  std::ifstream in(model + "/expected_greedy_200_from_bos.txt");
  std::string expected((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!expected.empty() && expected.back() == '\n') expected.pop_back();
  EXPECT_EQ(text, expected);
#endif
}

}  // namespace
}  // namespace cypris
