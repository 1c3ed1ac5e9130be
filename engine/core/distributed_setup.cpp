#include "engine/core/distributed_setup.h"

#include "engine/backend/mpi_world.h"
#include "engine/common/error.h"
#include "engine/common/log.h"

namespace cypris {

bool use_mpi_processes(const EngineConfig& cfg) {
  const LauncherWorld launcher = launcher_world();
  const std::string backend =
      cfg.parallel.distributed_executor_backend.value_or(launcher.size > 1 ? "mpi" : "mp");
  CYPRIS_CHECK(backend != "ray",
               "--distributed-executor-backend ray: not supported in Cypris, which has no Ray; use mp (threads in one "
               "process) or mpi (one process per rank, started by mpirun)");
  CYPRIS_CHECK(backend == "mp" || backend == "mpi", "--distributed-executor-backend {}: allowed are mp and mpi",
               backend);
  const int64_t tp = cfg.parallel.tensor_parallel_size;
  const int64_t pp = cfg.parallel.pipeline_parallel_size;
  if (backend == "mp") {
    CYPRIS_CHECK(launcher.size == 1,
                 "--distributed-executor-backend mp runs every rank in this process, but mpirun started {} "
                 "processes: use --distributed-executor-backend mpi (or leave it unset), or start one process",
                 launcher.size);
    return false;
  }
  MpiWorld& world = MpiWorld::instance();
  if (world.size() != tp * pp) {
    world.fail(fmt::format(
        "--distributed-executor-backend mpi: mpirun started {} process{}, but --tensor-parallel-size {} x "
        "--pipeline-parallel-size {} needs {} (one process per rank): run mpirun -np {}",
        world.size(), world.size() == 1 ? "" : "es", tp, pp, tp * pp, tp * pp));
  }
  if (world.size() == 1) return false;  // nothing to spread: the plain one-process engine
  if (world.rank() == 0) {
    std::string hosts;
    for (const auto& h : world.host_names()) hosts += (hosts.empty() ? "" : ", ") + h;
    LOG_INFO("MPI: {} processes (ranks 0..{} on {}); process 0 runs the engine, the others serve its steps",
             world.size(), world.size() - 1, hosts);
  } else {
    world.host_names();  // the same collective as process 0's
  }
  return true;
}

}  // namespace cypris
