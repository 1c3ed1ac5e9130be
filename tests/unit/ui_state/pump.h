// Test helper: runs the UI queue until a condition holds, as the app's frame loop would.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "app/ui/state/background_jobs.h"
#include "app/ui/state/ui_queue.h"

namespace cypris::fake {

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
