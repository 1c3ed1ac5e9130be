// The processes of an MPI run (--distributed-executor-backend mpi, docs/distributed.md): process 0
// runs the engine and sends each step's batch and KV block moves to the others (step_messages.h);
// every other process builds its shard in the ModelRunner constructor and then serves those steps
// here until process 0 stops it. Without pipeline stages the logits need no message (the LM head's
// all-gather gives every rank the full rows; only process 0 samples); with stages the last stage
// sends them to process 0 (pipeline_ranks.h).
#pragma once

#include <vector>

#include "engine/backend/mpi_world.h"
#include "engine/loader/model_config.h"
#include "engine/runtime/step_messages.h"

namespace cypris {

class ModelRunner;
struct ModelRunnerOptions;

// Start-up checks, on every process at once: the world has tp x pp processes (one rank each), and
// every process runs the same Cypris version with the same model config and runner settings (a hash
// of them exchanged, pipeline stages included). Throws Error naming the processes that differ (and
// marks the world failed, so the processes exit without waiting for each other).
void check_mpi_layout(MpiWorld& world, int tp, int pp, const ModelConfig& cfg, const ModelRunnerOptions& options);

// The text the start-up hash is made of (tests compare it).
std::string mpi_config_fingerprint(const ModelConfig& cfg, const ModelRunnerOptions& options);

// Process 0: one control message to the other processes.
void send_to_mpi_workers(StepMessage kind, const std::vector<char>& payload);

// Process > 0: receive -> execute on this process's shard, until process 0 sends stop; then the
// process exits (0). A step that fails here ends the whole job (MPI_Abort) after logging why, so
// process 0 hears of it (mpirun's SIGTERM) instead of waiting.
[[noreturn]] void serve_mpi_worker(ModelRunner& runner);

}  // namespace cypris
