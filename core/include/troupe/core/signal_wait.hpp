#pragma once
// Waiting for SIGINT, SIGTERM or SIGHUP in a process that has threads.
//
// A handler, not a blocked mask and sigwait: a mask reaches only the threads started after it, and
// some start before main() (OpenBLAS's pool, when the library loads) or set masks of their own
// (libtorch's, OpenMP's). A process-directed signal that finds one of them with the signal
// unblocked ends the process with the default action, without its clean stop -- seen as `troupe
// dashboard` ending by SIGTERM once in 300 stops, whenever the main thread was not yet in sigwait.
// With a handler installed, whichever thread takes the signal runs it, and it only posts a wake.

#include <initializer_list>

namespace troupe {

class signal_waiter {
 public:
  // Installs the handler for each of `signals` (SA_RESTART). The process has one set of them: a
  // second waiter adds its signals to the same wake.
  explicit signal_waiter(std::initializer_list<int> signals);
  // The next of the waiter's signals (one received before the call counts), blocking until then.
  int wait();
  // The signal received since the last wait() without blocking, or 0.
  int poll();
};

}  // namespace troupe
