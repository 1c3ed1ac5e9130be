// issue #20 item 8: KV space that memory cannot back (--cpu-kvcache-space 64 on a 24 GB machine)
// started and failed later; 1000 gave a bare std::bad_alloc. Both are refused at start by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "tests/support/engine_jobs.h"

namespace cypris {
namespace {

using ::testing::HasSubstr;

std::string start_error(const EngineConfig& cfg) {
  try {
    Engine e(cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KvSpace, MoreThanPhysicalMemoryIsRefusedAtStart) {
  EngineConfig cfg = testing_support::stories_config();
  cfg.cache.cpu_kvcache_space = 100000;  // GiB
  const std::string msg = start_error(cfg);
  EXPECT_THAT(msg, HasSubstr("--cpu-kvcache-space 100000"));
  EXPECT_THAT(msg, HasSubstr("memory"));
  cfg = testing_support::stories_config();
  cfg.cache.num_gpu_blocks_override = int64_t{1000000000000};
  EXPECT_THAT(start_error(cfg), HasSubstr("--num-gpu-blocks-override"));
}

}  // namespace
}  // namespace cypris
