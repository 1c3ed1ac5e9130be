// A small fixed-size thread pool for the CPU kernels: parallel_for over an index range, the
// calling thread taking part. Nested calls from inside a task run serially (no deadlock).
//
// A forward pass calls parallel_for a hundred times or more per token, each call a few tens of
// microseconds of work, so the hand-off must cost far less than a thread wake-up (tens of µs in a
// VM). Chunks are claimed with one compare-and-swap on a word holding (job generation, next chunk,
// chunk count) — no lock per chunk — and idle workers spin for a short while (kSpin) watching that
// word before they sleep on a condition variable; the caller spins the same way for the last chunk.
// Between forward passes (longer than kSpin) the workers sleep, so an idle engine uses no CPU.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cypris {

class ThreadPool {
 public:
  // num_threads counts the caller; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n), each at least min_chunk long (except
  // the last). Blocks until all chunks are done; rethrows the first exception a chunk threw.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk = 1);

  // How long an idle thread polls before it sleeps. CYPRIS_POOL_SPIN_US overrides it (0: sleep at
  // once, the behaviour to choose when the machine's cores are shared with other busy programs).
  static std::chrono::microseconds spin_time();

 private:
  void worker_loop();
  // Runs chunks of job generation gen until none is left (or the job is no longer gen).
  void run_chunks(uint32_t gen);

  int num_threads_ = 1;
  std::vector<std::thread> workers_;

  // state_: generation (high 32 bits) | next chunk (bits 16..31) | chunk count (low 16 bits).
  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> done_{0};  // chunks of the current job finished
  std::atomic<bool> stop_{false};
  std::atomic<int> sleeping_{0};  // threads blocked (or about to block) on a condition variable
  std::mutex mu_;                 // guards the sleeps and error_
  std::condition_variable cv_work_;
  std::condition_variable cv_done_;
  uint32_t generation_ = 0;  // the caller's copy (under run_mu_)

  // Current job: written before the generation is published, read after a chunk is claimed.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;  // guarded by mu_
  std::mutex run_mu_;         // one parallel_for at a time from outside threads
};

// Calls fn(g, j0, j1) over [0, n) for each of `groups` groups as one parallel_for over the
// groups x n items, so many small groups (a MoE layer's experts at decode) cost one hand-off, not
// one each. A chunk that crosses a group boundary calls fn once per group it covers. pool may be null.
void parallel_for_groups(ThreadPool* pool, int64_t groups, int64_t n,
                         const std::function<void(int64_t g, int64_t j0, int64_t j1)>& fn, int64_t min_chunk = 1);

// One pool per process with a thread per hardware thread, made on first use: for start-up work
// (reading and generating weights), not for the model's kernels, which use the backend's pool of
// --threads.
ThreadPool& shared_thread_pool();

}  // namespace cypris
