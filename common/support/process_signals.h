// How a rank learns that it should stop, and how it says why it died.
//
// Stop requests: SIGINT, SIGTERM and SIGUSR1 set a flag that the actor and learner loops
// poll between steps, so a run winds down at a step boundary and learner 0 writes a final
// checkpoint. SIGUSR1 is there because mpirun forwards it to every rank unchanged, while
// its own SIGINT/SIGTERM handling kills the ranks after `odls_base_sigkill_timeout`
// seconds (launch/kvrl-mpirun turns an interrupt into SIGUSR1, docs/reliability.md).
//
// Crash reports: SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT print one line naming the
// rank, its role and the signal before the default action ends the process, so the job's
// output says which rank of which role failed even when the failure is a hard crash.
//
// A signal handler can only reach state through statics: the flag and the prepared crash
// line are this file's only process-wide state, written before the handlers are installed
// or by the handlers themselves.
#pragma once

#include <string>

namespace kvrl {

// Installs the stop-request handlers (idempotent).
void install_stop_request_handlers();
// The signal that asked this rank to stop, or 0. Also set by request_stop().
int stop_requested();
// Asks for a stop as if a signal had arrived (a peer's request, or a test).
void request_stop(int signal_number);
// "SIGTERM", "SIGINT", ...; "signal N" for others.
std::string signal_name(int signal_number);

// Installs the crash reporters, naming `rank` and `role` in their line (idempotent; the
// last call's rank and role win).
void install_crash_reporter(int rank, const std::string& role);

}  // namespace kvrl
