// The runner watches the master as the master watches the other nodes. A master that stops
// answering (hung, SIGSTOPped, wedged on a lock) while its process lives is fenced through the
// launcher (SIGKILL to its process group, a stopped process included) and relaunched when its exit
// report comes, with the next incarnation: it resumes from the journal and the nodes re-join. A
// fenced master never runs again, so it cannot declare the live job dead; and nodes ignore the
// views of a master incarnation older than the one they follow (node_runtime).
#include <spdlog/spdlog.h>

#include "runner.hpp"

namespace troupe::control {

void runner::watch_master() {
  // A gap of real time between two turns of the loop is the runner's own pause (Ctrl-Z, SIGSTOP, a
  // starved CPU, a blocking command): the master, silent meanwhile for all the runner could see, was
  // fenced though it trained on (a 5 s Ctrl-Z cost a master restart). Real time, not the runner's
  // clock: a test's manual clock has no pauses.
  const auto real = troupe::clock::system().now();
  if (const auto gap = real - last_turn_;
      last_turn_ != troupe::clock::time_point{} && gap > watch_.limits().hang_limit / 2) {
    spdlog::info("the runner was paused for {:.1f} s: the master's silence meanwhile is not held against it",
                 std::chrono::duration<double>(gap).count());
    watch_.excuse();
  }
  last_turn_ = real;
  watch_.refresh();
  auto* slot = slots_.find("master");
  if (!slot || outcome_.finished() || !slot->handle || slot->fenced) return;
  auto silent = watch_.hung();
  if (!silent) return;
  spdlog::warn("{} has not answered for {:.1f} s ({}): fencing it", slot->id.to_string(),
               std::chrono::duration<double>(*silent).count(),
               watch_.ever_answered() ? "hung?" : "never came up");
  if (auto r = slots_.fence(*slot); !r) {
    spdlog::warn("fence {}: {}", slot->id.to_string(), r.err().to_string());
    return;
  }
  // In the timeline as a worker's fence is (a hung master read as one killed: only its "replaced").
  timeline_.node_event("fenced", slot->id.to_string(),
                       watch_.ever_answered() ? "silent for the runner (hung?)" : "never came up");
  // Its members' list is the hung master's: nobody is fenced on its word any more.
  watch_.forget_status();
}

}  // namespace troupe::control
