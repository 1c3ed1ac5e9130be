// BackgroundJobs: the worker threads of the desktop app. Each job gets a stop flag; shutdown()
// raises every flag and joins, so the app can close while a download or a load is running.
// Exceptions thrown by a job are caught here and reported through on_error (never escape a thread).
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace cypris {

class BackgroundJobs {
 public:
  using Job = std::function<void(const std::atomic<bool>& stop)>;

  explicit BackgroundJobs(std::function<void(const std::string&)> on_error = {});
  ~BackgroundJobs();
  BackgroundJobs(const BackgroundJobs&) = delete;
  BackgroundJobs& operator=(const BackgroundJobs&) = delete;

  // Starts the job on its own thread; `name` prefixes an error message. Finished threads are
  // reaped on the next run() or shutdown().
  void run(const std::string& name, Job job);

  // Number of jobs still running.
  size_t running() const;

  // Asks every job to stop and waits for them. Idempotent.
  void shutdown();

 private:
  struct Entry {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  void reap_locked();

  std::function<void(const std::string&)> on_error_;
  mutable std::mutex mu_;
  std::list<std::unique_ptr<Entry>> entries_;
  std::atomic<bool> stop_{false};
};

}  // namespace cypris
