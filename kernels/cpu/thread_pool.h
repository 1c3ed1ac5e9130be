// A small fixed-size thread pool for the CPU kernels: parallel_for over an index range, the
// calling thread taking part. Nested calls from inside a task run serially (no deadlock).
#pragma once

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

 private:
  void worker_loop();
  void run_chunks();

  int num_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_;
  std::condition_variable cv_done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int active_ = 0;
  // Current job.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  int64_t next_ = 0;  // guarded by mu_
  std::exception_ptr error_;
  std::mutex run_mu_;  // one parallel_for at a time from outside threads
};

// One pool per process with a thread per hardware thread, made on first use: for start-up work
// (reading and generating weights), not for the model's kernels, which use the backend's pool of
// --threads.
ThreadPool& shared_thread_pool();

}  // namespace cypris
