// Several Cypris processes started by mpirun (--distributed-executor-backend mpi): the MPI world
// (rank, size, start-up and shutdown), the control channel rank 0 drives the others with, and the
// tensor-parallel communicator between processes (MPI on the CPU, NCCL with its unique id sent over
// MPI on GPUs). Every wait is polled with a deadline and gives up when the process is told to stop,
// so a peer that dies makes this process fail with an error instead of blocking forever.
// Compiled against MPI only when the build found it (CYPRIS_HAVE_MPI); otherwise MpiWorld::instance()
// refuses with an error saying so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/communicator.h"
#include "engine/common/tensor.h"  // Device

namespace cypris {

// True when this build has MPI support.
bool mpi_built();

// What the launcher says about this process, read from its environment without starting MPI
// (OMPI_COMM_WORLD_{SIZE,RANK,LOCAL_RANK}, else PMI_SIZE / PMI_RANK): size 1, rank 0 when this
// process was not started by mpirun.
struct LauncherWorld {
  int size = 1;
  int rank = 0;
  int local_rank = 0;
};
LauncherWorld launcher_world();

// The control channel's message kinds below kFirstUserKind are MpiWorld's own.
enum : int64_t { kControlStop = 0, kControlFirstUserKind = 1 };

struct ControlMessage {
  int64_t kind = kControlStop;
  std::vector<char> payload;
};

class MpiWorld {
 public:
  // Starts MPI on first use (MPI_Init_thread) and registers the shutdown at exit. Throws Error when
  // the build has no MPI or MPI cannot start.
  static MpiWorld& instance();
  // The world when instance() has been called, else null.
  static MpiWorld* started();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  const std::string& host() const { return host_; }

  // Seconds a wait for the other processes may take before this process gives up on them
  // (CYPRIS_DISTRIBUTED_TIMEOUT, default 60).
  double timeout_seconds() const { return timeout_s_; }
  // Set once a wait failed (a peer died, timed out, or this process was told to stop): every MPI
  // call after that throws this message, and the process skips MPI_Finalize at exit.
  bool failed() const { return !failure_.empty(); }
  const std::string& failure() const { return failure_; }

  // Bootstrap checks: every process passes its value; returns every rank's, in rank order.
  std::vector<uint64_t> all_gather(uint64_t value);
  // The smallest value over the processes (the KV-cache blocks every rank can hold).
  int64_t all_reduce_min(int64_t value);
  // Every process's host name, in rank order (for messages).
  std::vector<std::string> host_names();

  // Control channel, rank 0 to every other process, in order. send_control on rank 0 only;
  // receive_control on the others waits without a deadline (an idle server sends nothing), sleeping
  // between polls.
  void send_control(int64_t kind, const std::vector<char>& payload);
  ControlMessage receive_control();
  // Rank 0: tells the others to leave their loop (once; also done at exit if nobody did).
  void send_stop();
  // Rank 0: the other processes are in their step loop (they need a stop at exit; before this, a
  // process that exits ends the whole job instead).
  void mark_serving() { serving_ = true; }

  // A communicator over the processes that pass the same `group` (every process calls this at once;
  // ranked in world order): a pipeline stage's tensor-parallel ranks, or group 0 from every process
  // for the whole world (the stages' hand-offs, by world rank). MPI collectives and point-to-point
  // transfers on host memory for CPU ranks; on GPUs, NCCL (ncclCommInitRank with the unique id the
  // group's first process makes, broadcast over MPI) on this process's device `cuda_device`.
  std::unique_ptr<Communicator> make_communicator(Device device, int cuda_device, int group = 0);

  // A worker's end: MPI_Finalize (skipped after a failure), flush, _exit(code).
  [[noreturn]] void exit_process(int code);

  // Waits for an MPI request (an MPI_Request*) to finish: a deadline of timeout_seconds() unless
  // idle, and gives up at once when this process received SIGINT / SIGTERM (mpirun sends SIGTERM
  // when another process of the job died). Throws Error naming `what` and marks the world failed.
  void wait(void* request, const char* what, bool idle = false);
  // Marks the world failed with this message and throws it.
  [[noreturn]] void fail(std::string message);
  // Throws the failure when the world has failed.
  void check_usable() const;
  // A worker that cannot go on: logs nothing more, ends the whole job (MPI_Abort); rank 0 then hears
  // SIGTERM from mpirun and fails its in-flight requests.
  [[noreturn]] void abort_job(int code);

  ~MpiWorld();

 private:
  MpiWorld();
  void finalize_at_exit();
  friend void mpi_world_at_exit();

  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  std::string host_;
  double timeout_s_ = 60;
  long spin_limit_ = 200;  // MPI_Test polls before a wait starts sleeping (CYPRIS_MPI_SPIN)
  std::string failure_;
  bool stop_sent_ = false;
  bool stopping_ = false;
  bool serving_ = false;  // sending the stop: signals do not cut the wait short
  bool finalized_ = false;
  struct Comms;                   // the MPI communicators (control channel, bootstrap), mpi_world.cpp
  std::unique_ptr<Comms> comms_;
};

}  // namespace cypris
