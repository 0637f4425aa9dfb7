// The runner watches the master as the master watches the other nodes. A master that stops
// answering (hung, SIGSTOPped, wedged on a lock) while its process lives is fenced through the
// launcher (SIGKILL to its process group, a stopped process included) and relaunched when its exit
// report comes, with the next incarnation: it resumes from the journal and the nodes re-join. A
// fenced master never runs again, so it cannot declare the live job dead; and nodes ignore the
// views of a master incarnation older than the one they follow (node_runtime).
#include <spdlog/spdlog.h>

#include "runner.hpp"

namespace troupe::control {

namespace {
// A master that never answered gets this long to open its journal and listen (big datasets).
constexpr auto master_startup_limit = std::chrono::seconds(30);
// Status polls come every 250 ms; this long without an answer shows on the progress line.
constexpr auto master_quiet = std::chrono::milliseconds(1500);
}  // namespace

// True while the master, having answered before, has not answered for a while: its last numbers
// are stale and are not shown as current.
bool runner::master_silent() const {
  return master_answered_ && clock_.now() - master_heard_ > master_quiet;
}

void runner::watch_master() {
  master_quiet_ = master_silent();
  auto it = nodes_.find("master");
  if (it == nodes_.end() || finished_) return;
  auto& slot = it->second;
  if (!slot.handle || slot.fenced) return;
  // The transport closes a connection silent for heartbeat_timeout; three of them without a
  // status answer is a hang, not a slow tick (the master answers status from its own mailbox).
  auto hang_limit =
      std::max<std::chrono::milliseconds>(std::chrono::seconds(3), 3 * spec_.transport.heartbeat_timeout);
  auto now = clock_.now();
  auto silent = master_answered_ ? now - master_heard_ : now - master_launched_;
  if (silent < (master_answered_ ? std::chrono::duration_cast<troupe::clock::duration>(hang_limit)
                                 : std::chrono::duration_cast<troupe::clock::duration>(master_startup_limit)))
    return;
  spdlog::warn("{} has not answered for {:.1f} s ({}): fencing it", slot.id.to_string(),
               std::chrono::duration<double>(silent).count(), master_answered_ ? "hung?" : "never came up");
  if (auto r = launcher_->fence(*slot.handle); !r) {
    spdlog::warn("fence {}: {}", slot.id.to_string(), r.err().to_string());
    return;
  }
  slot.fenced = true;
  // Its members' list is the hung master's: nobody is fenced on its word any more.
  std::lock_guard lk(mu_);
  status_.valid = false;
}

}  // namespace troupe::control
