#include "engine/backend/mpi_world.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/common/stop_signal.h"
#if CYPRIS_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only (the C++ bindings live in another library)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif
#if CYPRIS_HAVE_CUDA
#include "engine/backend/cuda/nccl_communicator.h"
#endif

namespace cypris {

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (end && *end == '\0' && x >= 0 && x <= INT_MAX) ? static_cast<int>(x) : fallback;
}

MpiWorld* g_world = nullptr;

}  // namespace

LauncherWorld launcher_world() {
  LauncherWorld w;
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    w.size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    w.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    w.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  } else if (std::getenv("PMI_SIZE")) {
    w.size = env_int("PMI_SIZE", 1);
    w.rank = env_int("PMI_RANK", 0);
    w.local_rank = env_int("MPI_LOCALRANKID", 0);
  }
  if (w.size < 1) w.size = 1;
  return w;
}

MpiWorld* MpiWorld::started() { return g_world; }

void mpi_world_at_exit() {
  if (g_world) g_world->finalize_at_exit();
}

#if CYPRIS_HAVE_MPI

bool mpi_built() { return true; }

struct MpiWorld::Comms {
  MPI_Comm control = MPI_COMM_NULL;
  MPI_Comm boot = MPI_COMM_NULL;
};

namespace {

std::string mpi_error_text(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(buf, static_cast<size_t>(len));
}

bool stop_signal_pending() {
  sigset_t pending;
  if (sigpending(&pending) != 0) return false;
  return sigismember(&pending, SIGTERM) == 1 || sigismember(&pending, SIGINT) == 1;
}

// The tensor-parallel collectives between processes, on host memory. The all-reduce gathers every
// rank's buffer and sums it in rank order on each rank, as CpuCommunicator does, so the result is the
// same on every rank and in every run (and the same as the in-process ranks').
class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MpiWorld& world, MPI_Comm comm) : world_(world), comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    if (!world_.failed() && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }

  void all_reduce_sum(float* data, int64_t count) override {
    if (size_ == 1 || count <= 0) return;
    const int n = checked_count(count, "all-reduce");
    gathered_.resize(static_cast<size_t>(count) * static_cast<size_t>(size_));
    MPI_Request req;
    world_.check_usable();
    MPI_Iallgather(data, n, MPI_FLOAT, gathered_.data(), n, MPI_FLOAT, comm_, &req);
    world_.wait(&req, "tensor-parallel all-reduce");
    const float* g = gathered_.data();
    for (int64_t i = 0; i < count; ++i) {
      float s = g[i];
      for (int r = 1; r < size_; ++r) s += g[static_cast<int64_t>(r) * count + i];
      data[i] = s;
    }
  }

  void all_gather(const float* send, float* recv, int64_t count) override {
    if (count <= 0) return;
    const int n = checked_count(count, "all-gather");
    MPI_Request req;
    world_.check_usable();
    if (send == recv + static_cast<int64_t>(rank_) * count) {
      MPI_Iallgather(MPI_IN_PLACE, 0, MPI_FLOAT, recv, n, MPI_FLOAT, comm_, &req);
    } else {
      MPI_Iallgather(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, comm_, &req);
    }
    world_.wait(&req, "tensor-parallel all-gather");
  }

  void barrier() override {
    MPI_Request req;
    world_.check_usable();
    MPI_Ibarrier(comm_, &req);
    world_.wait(&req, "barrier");
  }

  // The hand-offs between pipeline stages: bytes, so any activation type travels as it is.
  int64_t start_send(const void* data, DType dtype, int64_t count, int peer) override {
    return start(const_cast<void*>(data), dtype, count, peer, /*send=*/true);
  }
  int64_t start_recv(void* data, DType dtype, int64_t count, int peer) override {
    return start(data, dtype, count, peer, /*send=*/false);
  }
  void finish(int64_t ticket) override {
    auto it = pending_.find(ticket);
    if (it == pending_.end()) return;  // nothing to wait for (an empty transfer)
    MPI_Request req = it->second.request;
    const bool send = it->second.send;
    const int peer = it->second.peer;
    pending_.erase(it);
    const std::string what = send ? fmt::format("sending a pipeline stage's output to process {}", peer)
                                  : fmt::format("receiving a pipeline stage's input from process {}", peer);
    world_.wait(&req, what.c_str());
  }

 private:
  struct Pending {
    MPI_Request request;
    bool send;
    int peer;
  };
  int64_t start(void* data, DType dtype, int64_t count, int peer, bool send) {
    CYPRIS_CHECK(peer >= 0 && peer < size_ && peer != rank_, "{} rank {} of {} on rank {}",
                 send ? "send to" : "recv from", peer, size_, rank_);
    CYPRIS_CHECK(count >= 0, "MPI {} of {} elements", send ? "send" : "recv", count);
    const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
    if (bytes == 0) return -1;
    const int n = checked_count(bytes, send ? "send (bytes)" : "recv (bytes)");
    world_.check_usable();
    MPI_Request req;
    const int rc = send ? MPI_Isend(data, n, MPI_BYTE, peer, 0, comm_, &req)
                        : MPI_Irecv(data, n, MPI_BYTE, peer, 0, comm_, &req);
    if (rc != MPI_SUCCESS) {
      world_.fail(fmt::format("MPI {} rank {}: {}", send ? "send to" : "recv from", peer, mpi_error_text(rc)));
    }
    const int64_t ticket = next_ticket_++;
    pending_.emplace(ticket, Pending{req, send, peer});
    return ticket;
  }

 private:
  static int checked_count(int64_t count, const char* what) {
    CYPRIS_CHECK(count >= 0 && count <= INT_MAX, "MPI {} of {} elements: at most {} per call", what, count, INT_MAX);
    return static_cast<int>(count);
  }

  MpiWorld& world_;
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<float> gathered_;
  std::map<int64_t, Pending> pending_;  // started point-to-point transfers by ticket
  int64_t next_ticket_ = 0;
};

}  // namespace

MpiWorld& MpiWorld::instance() {
  if (g_world) return *g_world;
  g_world = new MpiWorld();  // lives until the process ends (MPI cannot be started twice)
  std::atexit(mpi_world_at_exit);
  return *g_world;
}

MpiWorld::MpiWorld() : comms_(std::make_unique<Comms>()) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  if (!initialized) {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    CYPRIS_CHECK(rc == MPI_SUCCESS, "--distributed-executor-backend mpi: MPI could not start ({})", mpi_error_text(rc));
  } else {
    MPI_Query_thread(&provided);
  }
  CYPRIS_CHECK(provided >= MPI_THREAD_SERIALIZED,
               "--distributed-executor-backend mpi: this MPI library offers thread level {} (Cypris calls MPI from "
               "its engine thread and needs MPI_THREAD_SERIALIZED or better)",
               provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  local_rank_ = launcher_world().local_rank;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_dup(MPI_COMM_WORLD, &comms_->control);
  MPI_Comm_dup(MPI_COMM_WORLD, &comms_->boot);
  MPI_Comm_set_errhandler(comms_->control, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(comms_->boot, MPI_ERRORS_RETURN);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  host_.assign(name, static_cast<size_t>(len));
  if (const char* t = std::getenv("CYPRIS_DISTRIBUTED_TIMEOUT")) {
    char* end = nullptr;
    const double v = std::strtod(t, &end);
    CYPRIS_CHECK(end && *end == '\0' && v > 0 && v <= 86400,
                 "CYPRIS_DISTRIBUTED_TIMEOUT '{}' must be a number of seconds in (0, 86400]", t);
    timeout_s_ = v;
  }
  if (const char* t = std::getenv("CYPRIS_MPI_SPIN")) {
    char* end = nullptr;
    const long v = std::strtol(t, &end, 10);
    CYPRIS_CHECK(end && *end == '\0' && v >= 0 && v <= 100000000,
                 "CYPRIS_MPI_SPIN '{}' must be a number of polls in [0, 100000000]", t);
    spin_limit_ = v;
  }
  // generate / bench keep the default dispositions: a signal then only makes the waits give up, and
  // the command ends through its own error path (the server takes the signals with sigwait).
  install_stop_signal_handlers();
  LOG_INFO("MPI: process {} of {} on {} (pid {})", rank_, size_, host_, static_cast<long>(getpid()));
}

MpiWorld::~MpiWorld() = default;

void MpiWorld::check_usable() const {
  if (failed()) throw Error(failure_);
}

void MpiWorld::fail(std::string message) {
  const bool first = failure_.empty();
  if (first) failure_ = std::move(message);
  if (first) {
    LOG_ERROR("process {} of {}: {}", rank_, size_, failure_);
    // Without a signal (a timeout, a lost connection) nobody else tells this process to stop: ask its
    // front end to shut down the way SIGTERM does. At exit the process skips MPI_Finalize and exits 1.
    if (!stop_signal_received()) kill(getpid(), SIGTERM);
  }
  throw Error(failure_);
}

void MpiWorld::wait(void* request, const char* what, bool idle) {
  check_usable();
  auto* req = static_cast<MPI_Request*>(request);
  const auto start = std::chrono::steady_clock::now();
  for (long spin = 0;; ++spin) {
    int done = 0;
    const int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      fail(fmt::format("{}: {} (a process of the MPI job died or lost its connection)", what, mpi_error_text(rc)));
    }
    if (done) return;
    // While sending the stop itself, a signal does not cut the wait short (the others need the stop
    // to leave their loop); a short deadline bounds it instead.
    const double limit = stopping_ ? std::min(timeout_s_, 5.0) : timeout_s_;
    const int sig = stopping_ ? 0 : stop_signal_received();
    if (sig != 0) {
      fail(fmt::format("{}: stopped by {} (mpirun sends it to every process when one of the job's processes dies "
                       "or the job is interrupted)",
                       what, stop_signal_name(sig)));
    }
    if (spin < spin_limit_) continue;  // a collective between busy ranks: its peers are microseconds away
    if (!stopping_ && spin % 64 == 0 && stop_signal_pending()) {
      fail(fmt::format("{}: stopped by a pending SIGTERM/SIGINT (mpirun sends SIGTERM to every process when one of "
                       "the job's processes dies)",
                       what));
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!idle && waited > limit) {
      fail(fmt::format("{}: the other processes did not answer within {:.0f} s (CYPRIS_DISTRIBUTED_TIMEOUT): one of "
                       "them died or hangs",
                       what, limit));
    }
    // Then short sleeps: the core goes to the peer (or anyone else) instead of to polling, which
    // matters when there are fewer cores than processes; an idle worker sleeps longer.
    std::this_thread::sleep_for(std::chrono::microseconds(idle && waited > 0.5 ? 1000 : 20));
  }
}

std::vector<uint64_t> MpiWorld::all_gather(uint64_t value) {
  check_usable();
  std::vector<uint64_t> out(static_cast<size_t>(size_));
  MPI_Request req;
  MPI_Iallgather(&value, 1, MPI_UINT64_T, out.data(), 1, MPI_UINT64_T, comms_->boot, &req);
  wait(&req, "start-up check");
  return out;
}

int64_t MpiWorld::all_reduce_min(int64_t value) {
  check_usable();
  int64_t out = value;
  MPI_Request req;
  MPI_Iallreduce(&value, &out, 1, MPI_INT64_T, MPI_MIN, comms_->boot, &req);
  wait(&req, "start-up agreement");
  return out;
}

std::vector<std::string> MpiWorld::host_names() {
  check_usable();
  constexpr int kLen = 256;
  std::vector<char> mine(kLen, '\0'), all(static_cast<size_t>(kLen) * static_cast<size_t>(size_));
  std::memcpy(mine.data(), host_.data(), std::min<size_t>(host_.size(), kLen - 1));
  MPI_Request req;
  MPI_Iallgather(mine.data(), kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, comms_->boot, &req);
  wait(&req, "start-up check");
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r) out.emplace_back(all.data() + static_cast<size_t>(r) * kLen);
  return out;
}

void MpiWorld::send_control(int64_t kind, const std::vector<char>& payload) {
  check_usable();
  CYPRIS_CHECK(rank_ == 0, "only process 0 drives the others (this is process {})", rank_);
  CYPRIS_CHECK(payload.size() <= static_cast<size_t>(INT_MAX), "control message of {} bytes is too large",
               payload.size());
  int64_t header[2] = {kind, static_cast<int64_t>(payload.size())};
  MPI_Request req;
  MPI_Ibcast(header, 2, MPI_INT64_T, 0, comms_->control, &req);
  wait(&req, "sending the step to the other processes");
  if (payload.empty()) return;
  MPI_Ibcast(const_cast<char*>(payload.data()), static_cast<int>(payload.size()), MPI_BYTE, 0, comms_->control, &req);
  wait(&req, "sending the step to the other processes");
}

ControlMessage MpiWorld::receive_control() {
  check_usable();
  CYPRIS_CHECK(rank_ != 0, "process 0 sends control messages, it does not receive them");
  int64_t header[2] = {0, 0};
  MPI_Request req;
  MPI_Ibcast(header, 2, MPI_INT64_T, 0, comms_->control, &req);
  wait(&req, "waiting for the next step from process 0", /*idle=*/true);
  CYPRIS_CHECK(header[0] >= 0 && header[1] >= 0 && header[1] <= INT_MAX,
               "control message from process 0 has kind {} and {} bytes", header[0], header[1]);
  ControlMessage m;
  m.kind = header[0];
  m.payload.resize(static_cast<size_t>(header[1]));
  if (!m.payload.empty()) {
    MPI_Ibcast(m.payload.data(), static_cast<int>(m.payload.size()), MPI_BYTE, 0, comms_->control, &req);
    wait(&req, "receiving the step from process 0");
  }
  return m;
}

void MpiWorld::send_stop() {
  if (rank_ != 0 || stop_sent_ || failed()) return;
  stop_sent_ = true;
  stopping_ = true;
  try {
    send_control(kControlStop, {});
  } catch (...) {
    stopping_ = false;
    throw;
  }
  stopping_ = false;
}

std::unique_ptr<Communicator> MpiWorld::make_communicator(Device device, int cuda_device, int group) {
  check_usable();
  CYPRIS_CHECK(group >= 0, "MPI communicator group {} must be >= 0", group);
  // The processes that pass the same group, ranked as in the world (MPI_Comm_split; every process
  // calls this at once).
  MPI_Comm comm = MPI_COMM_NULL;
  const int rc = MPI_Comm_split(MPI_COMM_WORLD, group, rank_, &comm);
  if (rc != MPI_SUCCESS) fail(fmt::format("MPI_Comm_split: {}", mpi_error_text(rc)));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (device == Device::Cpu) return std::make_unique<MpiCommunicator>(*this, comm);
#if CYPRIS_HAVE_CUDA
  // NCCL spans the group's processes (and machines): its rank 0 makes the unique id, MPI carries it
  // to the others, every process joins with its rank in the group on its own GPU.
  int sub_rank = 0, sub_size = 1;
  MPI_Comm_rank(comm, &sub_rank);
  MPI_Comm_size(comm, &sub_size);
  NcclUniqueIdBytes id{};
  if (sub_rank == 0) id = make_nccl_unique_id();
  MPI_Request req;
  MPI_Ibcast(id.data(), static_cast<int>(id.size()), MPI_BYTE, 0, comm, &req);
  wait(&req, "sending NCCL's unique id");
  MPI_Comm_free(&comm);
  return make_nccl_communicator_rank(id, sub_rank, sub_size, cuda_device);
#else
  (void)cuda_device;
  MPI_Comm_free(&comm);
  CYPRIS_FAIL("--distributed-executor-backend mpi on GPUs needs the CUDA build");
#endif
}

void MpiWorld::exit_process(int code) {
  if (!failed() && !finalized_) {
    finalized_ = true;
    MPI_Finalize();
  }
  std::fflush(nullptr);
  _exit(code);
}

void MpiWorld::abort_job(int code) {
  std::fflush(nullptr);
  MPI_Abort(MPI_COMM_WORLD, code);
  _exit(code);
}

void MpiWorld::finalize_at_exit() {
  if (finalized_) return;
  if (size_ > 1 && !failed() && (rank_ != 0 || !serving_)) {
    // A worker leaves only through exit_process; one that gets here failed before or while it set up
    // (its error is on its stderr). So did process 0 if its runner never got going. MPI_Finalize
    // would wait for the others, who wait in a start-up collective: end the whole job instead.
    abort_job(1);
  }
  if (!failed()) {
    try {
      send_stop();  // the workers wait for it: MPI_Finalize below would wait for them forever
    } catch (const std::exception&) {
    }
  }
  if (failed()) {
    // MPI_Finalize would wait for the peer that is gone: leave without it, with an error status.
    std::fflush(nullptr);
    _exit(1);
  }
  finalized_ = true;
  MPI_Finalize();
}

#else  // no MPI in this build

bool mpi_built() { return false; }

struct MpiWorld::Comms {};

MpiWorld& MpiWorld::instance() {
  CYPRIS_FAIL(
      "--distributed-executor-backend mpi: this build of Cypris has no MPI support (install libopenmpi-dev and "
      "openmpi-bin, then rebuild; see docs/distributed.md)");
}
MpiWorld::MpiWorld() = default;
MpiWorld::~MpiWorld() = default;
void MpiWorld::check_usable() const {}
void MpiWorld::fail(std::string message) { throw Error(std::move(message)); }
void MpiWorld::wait(void*, const char*, bool) { CYPRIS_FAIL("no MPI in this build"); }
std::vector<uint64_t> MpiWorld::all_gather(uint64_t value) { return {value}; }
int64_t MpiWorld::all_reduce_min(int64_t value) { return value; }
std::vector<std::string> MpiWorld::host_names() { return {host_}; }
void MpiWorld::send_control(int64_t, const std::vector<char>&) { CYPRIS_FAIL("no MPI in this build"); }
ControlMessage MpiWorld::receive_control() { CYPRIS_FAIL("no MPI in this build"); }
void MpiWorld::send_stop() {}
std::unique_ptr<Communicator> MpiWorld::make_communicator(Device, int, int) { CYPRIS_FAIL("no MPI in this build"); }
void MpiWorld::exit_process(int code) {
  std::fflush(nullptr);
  _exit(code);
}
void MpiWorld::abort_job(int code) { exit_process(code); }
void MpiWorld::finalize_at_exit() {}

#endif

}  // namespace cypris
