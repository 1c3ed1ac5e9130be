// The process-wide note that SIGINT or SIGTERM arrived, for code that waits on other processes
// (mpi_world.h): mpirun sends SIGTERM to every process of a job when one of them dies, and a wait
// that sees the note gives up with an error instead of blocking. The front end that takes the
// signal (sigwait in serve_main.cpp, or the handler install_stop_signal_handlers sets) records it.
#pragma once

namespace cypris {

// Async-signal-safe: records sig (the first one wins).
void note_stop_signal(int sig);
// The recorded signal, 0 when none arrived.
int stop_signal_received();
// "SIGTERM", "SIGINT" or "signal N".
const char* stop_signal_name(int sig);
// Installs a handler that only records SIGINT / SIGTERM, for each of them whose disposition is
// still the default (a front end that handles them itself keeps its own).
void install_stop_signal_handlers();

}  // namespace cypris
