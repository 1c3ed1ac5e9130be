// --distributed-executor-backend: which values run, which are refused and why, and how an mpirun
// launch is recognised (without starting MPI: the cases here are decided before that).
#include "engine/core/distributed_setup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/backend/mpi_world.h"
#include "engine/common/error.h"
#include "engine/config/options.h"

namespace cypris {
namespace {

std::string error_of(const EngineConfig& cfg) {
  try {
    use_mpi_processes(cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Sets launcher variables for one test and removes them after.
struct LauncherEnv {
  explicit LauncherEnv(std::vector<std::pair<const char*, const char*>> vars) : vars_(std::move(vars)) {
    for (auto& [k, v] : vars_) setenv(k, v, 1);
  }
  ~LauncherEnv() {
    for (auto& [k, v] : vars_) unsetenv(k);
  }
  std::vector<std::pair<const char*, const char*>> vars_;
};

TEST(DistributedBackend, RayIsRefusedByNameWithTheAlternatives) {
  EngineConfig cfg;
  cfg.parallel.distributed_executor_backend = "ray";
  EXPECT_THAT(error_of(cfg), ::testing::AllOf(::testing::HasSubstr("--distributed-executor-backend ray"),
                                              ::testing::HasSubstr("no Ray"), ::testing::HasSubstr("mpi")));
  // The command line refuses it the same way, before anything starts.
  const OptionSpec* spec = find_option("--distributed-executor-backend");
  ASSERT_NE(spec, nullptr);
  ASSERT_NE(spec->refusal("ray"), nullptr);
  EXPECT_THAT(*spec->refusal("ray"), ::testing::HasSubstr("no Ray"));
  EXPECT_THAT(spec->choices, ::testing::IsSupersetOf({"mp", "mpi"}));
}

TEST(DistributedBackend, OneProcessWithoutALauncherRunsThreads) {
  EngineConfig cfg;
  cfg.parallel.tensor_parallel_size = 2;
  EXPECT_FALSE(use_mpi_processes(cfg));
  cfg.parallel.distributed_executor_backend = "mp";
  EXPECT_FALSE(use_mpi_processes(cfg));
}

TEST(DistributedBackend, MpUnderAMultiProcessMpirunIsRefused) {
  LauncherEnv env({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  EngineConfig cfg;
  cfg.parallel.distributed_executor_backend = "mp";
  EXPECT_THAT(error_of(cfg), ::testing::AllOf(::testing::HasSubstr("mpirun started 2 processes"),
                                              ::testing::HasSubstr("--distributed-executor-backend mpi")));
}

TEST(DistributedBackend, PipelineStagesWithoutALauncherRunInThisProcess) {
  // -pp across processes needs mpirun (tests/mpi/mpi_runs.py); started alone, the stages are threads.
  EngineConfig cfg;
  cfg.parallel.pipeline_parallel_size = 2;
  cfg.parallel.tensor_parallel_size = 2;
  EXPECT_FALSE(use_mpi_processes(cfg));
}

TEST(LauncherWorld, ReadsOpenMpiAndPmiVariables) {
  {
    const LauncherWorld none = launcher_world();
    EXPECT_EQ(none.size, 1);
    EXPECT_EQ(none.rank, 0);
  }
  {
    LauncherEnv env({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
    const LauncherWorld w = launcher_world();
    EXPECT_EQ(w.size, 4);
    EXPECT_EQ(w.rank, 3);
    EXPECT_EQ(w.local_rank, 1);
  }
  {
    LauncherEnv env({{"PMI_SIZE", "2"}, {"PMI_RANK", "1"}});
    const LauncherWorld w = launcher_world();
    EXPECT_EQ(w.size, 2);
    EXPECT_EQ(w.rank, 1);
  }
  {
    LauncherEnv env({{"OMPI_COMM_WORLD_SIZE", "two"}, {"OMPI_COMM_WORLD_RANK", "0"}});  // garbage: not a launch
    EXPECT_EQ(launcher_world().size, 1);
  }
}

}  // namespace
}  // namespace cypris
