#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "engine/common/log.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace cypris {
namespace {

thread_local bool t_in_pool_task = false;

constexpr uint64_t kMaxChunks = 0xffff;

uint32_t gen_of(uint64_t s) { return static_cast<uint32_t>(s >> 32); }
uint64_t next_of(uint64_t s) { return (s >> 16) & 0xffff; }
uint64_t count_of(uint64_t s) { return s & 0xffff; }
uint64_t pack(uint32_t gen, uint64_t next, uint64_t count) {
  return (static_cast<uint64_t>(gen) << 32) | (next << 16) | count;
}

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls ready() for up to spin, then returns false (the caller then sleeps).
template <typename Ready>
bool spin_until(Ready ready, std::chrono::microseconds spin) {
  if (spin.count() <= 0) return ready();
  const auto deadline = std::chrono::steady_clock::now() + spin;
  for (int i = 1;; ++i) {
    if (ready()) return true;
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

}  // namespace

std::chrono::microseconds ThreadPool::spin_time() {
  static const std::chrono::microseconds spin = [] {
    long us = 200;
    if (const char* env = std::getenv("CYPRIS_POOL_SPIN_US"); env && *env) {
      char* end = nullptr;
      const long v = std::strtol(env, &end, 10);
      if (end && *end == '\0' && v >= 0 && v <= 1000000) {
        us = v;
      } else {
        LOG_WARN("CYPRIS_POOL_SPIN_US='{}' ignored: expected microseconds from 0 to 1000000; using {}", env, us);
      }
    }
    return std::chrono::microseconds(us);
  }();
  return spin;
}

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  num_threads_ = num_threads;
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(uint32_t gen) {
  uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if (gen_of(s) != gen || next_of(s) >= count_of(s)) return;
    if (!state_.compare_exchange_weak(s, s + (uint64_t{1} << 16), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;  // s now holds the current word
    }
    // The chunk is ours: the job cannot end (nor its fields change) before done_ counts it.
    const int64_t begin = static_cast<int64_t>(next_of(s)) * chunk_;
    const int64_t end = std::min(n_, begin + chunk_);
    if (!failed_.load(std::memory_order_relaxed)) {
      try {
        t_in_pool_task = true;
        (*fn_)(begin, end);
        t_in_pool_task = false;
      } catch (...) {
        t_in_pool_task = false;
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
    }
    const int64_t count = static_cast<int64_t>(count_of(s));
    if (done_.fetch_add(1) + 1 == count && sleeping_.load() > 0) {
      { std::lock_guard<std::mutex> lock(mu_); }
      cv_done_.notify_all();
    }
    s = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    // seq_cst loads: with the sleeping_ counter they form the handshake that no wake-up is lost.
    auto fresh = [&] { return stop_.load() || gen_of(state_.load()) != seen; };
    if (!spin_until(fresh, spin_time())) {
      std::unique_lock<std::mutex> lock(mu_);
      sleeping_.fetch_add(1);
      cv_work_.wait(lock, fresh);
      sleeping_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = gen_of(state_.load(std::memory_order_acquire));
    run_chunks(seen);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  if (num_threads_ == 1 || t_in_pool_task || n <= min_chunk) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  // A few chunks per thread balance uneven work without much contention.
  const int64_t chunk = std::max({min_chunk, (n + num_threads_ * 4 - 1) / (num_threads_ * 4),
                                  (n + static_cast<int64_t>(kMaxChunks) - 1) / static_cast<int64_t>(kMaxChunks)});
  const auto count = static_cast<uint64_t>((n + chunk - 1) / chunk);
  fn_ = &fn;
  n_ = n;
  chunk_ = chunk;
  failed_.store(false, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = ++generation_;
  state_.store(pack(gen, 0, count));  // seq_cst: publishes the job, then the sleepers are read
  if (sleeping_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_work_.notify_all();
  }
  run_chunks(gen);
  auto finished = [&] { return done_.load() == static_cast<int64_t>(count); };
  if (!spin_until(finished, spin_time())) {
    std::unique_lock<std::mutex> lock(mu_);
    sleeping_.fetch_add(1);
    cv_done_.wait(lock, finished);
    sleeping_.fetch_sub(1);
  }
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lock(mu_);
    err = error_;
    error_ = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

void parallel_for_groups(ThreadPool* pool, int64_t groups, int64_t n,
                         const std::function<void(int64_t, int64_t, int64_t)>& fn, int64_t min_chunk) {
  if (groups <= 0 || n <= 0) return;
  auto flat = [&](int64_t i0, int64_t i1) {
    while (i0 < i1) {
      const int64_t g = i0 / n;
      const int64_t j0 = i0 - g * n;
      const int64_t j1 = std::min(n, j0 + (i1 - i0));
      fn(g, j0, j1);
      i0 += j1 - j0;
    }
  };
  if (pool) {
    pool->parallel_for(groups * n, flat, min_chunk);
  } else {
    flat(0, groups * n);
  }
}

ThreadPool& shared_thread_pool() {
  static ThreadPool pool(0);
  return pool;
}

}  // namespace cypris
