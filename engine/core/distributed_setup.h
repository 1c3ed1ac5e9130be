// --distributed-executor-backend: whether the tensor-parallel ranks are threads of this process
// (mp) or the processes mpirun started (mpi), and the start-up checks of an MPI run that need the
// engine's options (the model-level checks are the runner's, mpi_worker.h).
#pragma once

#include "engine/config/engine_config.h"

namespace cypris {

// True when the ranks are MPI processes. Unset: mpi when the launcher started more than one process,
// else mp. ray is refused by the option table. Under mpi this starts MPI and checks that the world has
// --tensor-parallel-size x --pipeline-parallel-size processes; throws Error naming the flag otherwise
// (also for mp under a multi-process mpirun, and for mpi in a build without MPI).
bool use_mpi_processes(const EngineConfig& cfg);

}  // namespace cypris
