// Test helper: runs the UI queue until a condition holds, as the app's frame loop would.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "app/ui/state/background_jobs.h"
#include "app/ui/state/ui_queue.h"

namespace cypris::fake {

// Waits for the background jobs when it goes out of scope. Declared right after the sessions a test
// makes, it ends their jobs (which point into the sessions) before the sessions are destroyed, as
// ~App does in the app; without it a job still running at the end of a test (the cache refresh that
// follows a download) used the destroyed session: a rare segfault under ctest -j2.
struct JobsStopper {
  BackgroundJobs& jobs;
  ~JobsStopper() { jobs.shutdown(); }
};

// Drains the queue until done() is true. Fails the test instead of hanging when the workers go
// idle and the queue stays empty without done() becoming true.
inline bool pump_until(UiQueue& q, BackgroundJobs& jobs, const std::function<bool()>& done) {
  for (int idle = 0; idle < 100000;) {
    q.drain();
    if (done()) return true;
    if (jobs.running() == 0 && q.pending() == 0) {
      ++idle;
    }
    std::this_thread::yield();
  }
  ADD_FAILURE() << "condition never became true";
  return false;
}

}  // namespace cypris::fake
