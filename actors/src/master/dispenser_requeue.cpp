// The dispenser's tasks back to TODO: a dead or departed holder's, those of holders that are no
// members, expired leases, and what a ring restored from its checkpoint lost.
#include <spdlog/spdlog.h>

#include "dispenser.hpp"

namespace troupe::actors {

void task_dispenser::requeue_holder(const std::string& holder,
                                    const std::optional<storage::held_rows>& rows) {
  departed_.insert(holder);
  bool kept = false;
  if (auto n = count_requeued(journal_->requeue_holder(holder, rows, &kept)); n > 0) {
    const std::string with = kept ? ": task " + std::to_string(rows->id) + " with " +
                                        std::to_string(rows->trained) + " rows trained kept"
                                  : "";
    spdlog::info("dispenser: {} task(s) of {} back to TODO{}", n, holder, with);
    timeline_.requeue(holder, n, "holder gone" + with);
  }
}

void task_dispenser::requeue_absent(const std::vector<std::string>& alive_holders) {
  auto moved = journal_->requeue_holders_except(alive_holders);
  if (!moved) {
    disk_trouble(moved.err());  // retried at the next reconciliation
    return;
  }
  for (const auto& [h, n] : *moved) {
    spdlog::info("dispenser: {} task(s) of {} (not a member) back to TODO", n, h);
    timeline_.requeue(h, n, "holder not a member");
  }
}

void task_dispenser::requeue_expired() {
  if (auto n = count_requeued(journal_->requeue_expired(node_.clock().wall_ms())); n > 0) {
    spdlog::info("dispenser: {} expired lease(s) back to TODO", n);
    timeline_.requeue("", n, "lease expired");
  }
}

expected<task_dispenser::ring_restart> task_dispenser::ring_restored(std::uint64_t step) {
  auto reopened = journal_->reopen_after(step);
  if (!reopened) {
    if (!disk_trouble(reopened.err()))
      spdlog::error("dispenser: task journal: {}", reopened.err().to_string());
    return reopened.err();
  }
  ring_restart r{*reopened, {}};
  // Step 0: no checkpoint yet (a job's first ring finds no task done, and says nothing); the key
  // named, as the interval is the user's to shorten.
  const std::string from = step > 0 ? "its checkpoint of step " + std::to_string(step)
                                    : "its initial weights (no checkpoint yet: job.checkpoint_every_ms = " +
                                          std::to_string(node_.spec().job.checkpoint_every.count()) + ")";
  if (r.done + r.trained == 0) {
    if (step > 0) spdlog::info("dispenser: the ring starts again from {}, which holds every task done", from);
    return r;
  }
  const std::string what = std::to_string(r.done) + " DONE task(s) are trained again, and " +
                           std::to_string(r.trained) + " partly trained task(s) from their first row";
  r.said =
      "the ring starts again from " + from + ": what later steps applied was lost with the replicas: " + what;
  spdlog::warn("dispenser: {}", r.said);
  timeline_.requeue("", r.done + r.trained, "ring restored from " + from + ": " + what);
  return r;
}

}  // namespace troupe::actors
