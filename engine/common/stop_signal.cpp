#include "engine/common/stop_signal.h"

#include <signal.h>

#include <atomic>

namespace cypris {

namespace {
std::atomic<int> g_stop_signal{0};

void on_stop_signal(int sig) { note_stop_signal(sig); }
}  // namespace

void note_stop_signal(int sig) {
  int expected = 0;
  g_stop_signal.compare_exchange_strong(expected, sig);
}

int stop_signal_received() { return g_stop_signal.load(std::memory_order_relaxed); }

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "a signal";
  }
}

void install_stop_signal_handlers() {
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

}  // namespace cypris
