// UiQueue: how background threads (engine loads, downloads, hub queries, generation streams) hand
// results to the UI thread. Workers post closures; the UI thread runs them once per frame in
// drain(), so panel state is only ever touched on the UI thread and the UI never waits on a worker.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <utility>

namespace cypris {

class UiQueue {
 public:
  using Task = std::function<void()>;

  // Any thread. Never blocks for longer than a push onto a deque (plus the wake-up call).
  void post(Task task) {
    std::function<void()> wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
      wake = wake_;
    }
    if (wake) wake();
  }

  // Called after every post, from the posting thread: the app wakes its event loop with it
  // (glfwPostEmptyEvent) so it can sleep while nothing happens. Set before workers start.
  void set_wake(std::function<void()> wake) {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = std::move(wake);
  }

  // UI thread, once per frame: runs what was posted before this call, in order. Tasks posted
  // while draining run on the next frame (so a task that re-posts itself cannot stall a frame).
  // Returns the number of tasks run.
  size_t drain() {
    std::deque<Task> batch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      batch.swap(tasks_);
    }
    for (auto& t : batch) t();
    return batch.size();
  }

  size_t pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    return tasks_.size();
  }

 private:
  mutable std::mutex mu_;
  std::deque<Task> tasks_;
  std::function<void()> wake_;
};

}  // namespace cypris
