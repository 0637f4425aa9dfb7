// The job's batch choices ([train] batch = "auto" or "global", docs/goodput.md) as its timeline numbers
// them. The ring's controller numbers its choices (its seq) and keeps the number in its ring
// checkpoints; the timeline (<job dir>/events.jsonl) outlives both a master (a restarted master
// appends to the same file) and a run (a resumed job does too). So the number a progress report
// carries may be one the timeline already holds:
//   - the same choice again: a restarted master, or a job resumed from a checkpoint written after
//     the choice: nothing to write (and its `batch_measured` only if the timeline lacks it);
//   - another choice with the same number: a job resumed from a checkpoint older than the
//     timeline's last choice numbers its next choice as it did before the kill.
// A choice is known by the scale-invariant step it was made at (the report's choice_progress, which
// the checkpoint keeps with it: rounded to a float at the choice, so the same choice reads the same
// step in every run); a new one keeps the controller's number unless the timeline already has that
// number or a later one: then it is numbered after the timeline's last. Timelines written before
// the step was in the event (no `at_progress`) are matched by number.
//
// Threads: the master's. The file is read once, by read().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::actors {

class batch_choices {
 public:
  struct entry {
    std::uint32_t number = 0;  // the timeline's
    std::uint32_t seq = 0;     // the controller's, when placed by this master (0: read from the file)
    double at_progress = -1;   // < 0: unknown (a timeline written before it was kept)
    bool chosen = false;       // its "batch" event is in the timeline
    bool measured = false;     // its "batch_measured" event is
  };

  // The "batch" and "batch_measured" events of the timeline at `events_path` (a missing file: none).
  // A file that cannot be read is logged and counts as empty (the timeline may then repeat a choice).
  void read(const std::string& events_path);
  // The choice the ring's rank 0 reports (`seq`, the controller's number, > 0; made at `at_progress`):
  // the timeline's entry for it, or a new one (chosen false) to write under its `number`.
  entry& place(std::uint32_t seq, double at_progress);
  const std::vector<entry>& entries() const { return entries_; }

 private:
  std::vector<entry> entries_;
  std::uint32_t last_ = 0;  // the highest number in the timeline
};

}  // namespace troupe::actors
