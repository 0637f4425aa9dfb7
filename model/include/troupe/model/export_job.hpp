// `troupe export`: a job's model directory (docs/model_format.md) from the state it keeps — what the
// evaluating worker wrote at the job's end, else its latest checkpoints — so a running, stopped,
// failed or interrupted job has a model too. The runner calls it (as `troupe export`, in a process
// of its own: it loads libtorch) when a job finishes.
//
// The directory is built beside its place (`<out>.tmp-<random>/`) and moved into it in one rename
// (an existing model is swapped out atomically and removed): a reader sees the old model, the new
// one, or (the first time) none, never half of one. A failure leaves nothing behind.
//
// A built-in model's module is checked before it is moved into place: its logits on up to
// `verify_rows` test rows (read back from the saved model.pt) against the native model's on the
// same rows and state; a difference over 1e-4 is an error (model.json records the largest).
#pragma once

#include <cstdint>
#include <string>

#include "troupe/core/error.hpp"
#include "troupe/model/state.hpp"

namespace troupe::model {

struct export_options {
  std::string job_dir;
  std::string out;  // empty: <job_dir>/model
  std::size_t verify_rows = 2048;
};

struct export_report {
  std::string dir;  // the model directory written
  state_meta meta;  // the state it came from
  std::string state_dir;
  std::size_t dense_tensors = 0, embedding_rows = 0;
  std::size_t verified_rows = 0;
  double max_abs_diff = 0;  // exported vs native logits over the verified rows
  double seconds = 0;
};

// Errors name the file and the problem: not a job directory, no state (not_found), a state that
// does not fit the job's model (a tensor missing or of another size, both shapes named), the
// plugin's, a verification that failed.
expected<export_report> export_job(const export_options& o);

}  // namespace troupe::model
