// A prediction job's output (`troupe predict`, `troupe evaluate`; docs/model_format.md,
// "Predicting"): one part file per task, <job dir>/predictions/part-<task>.bin, written by the
// worker that ran the task (atomically: a temporary file renamed into place) before it reports the
// task done. A task redone after a kill writes the same part again, so the merged output has every
// input row once, in input order, whatever the kills.
//
// Part file: "TRPRED01", then u64 task, u64 first (record), u64 rows, u32 width, u32 reserved,
// f64 loss_sum; then per row f32 label and `width` f32 values (probabilities: the positive class's
// for a binary model, each class's otherwise). Little-endian.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"

namespace troupe::model {

struct prediction_part {
  std::uint64_t task = 0, first = 0, rows = 0;
  std::uint32_t width = 1;
  double loss_sum = 0;
  std::vector<float> labels, values;  // [rows], [rows * width]
};

std::string part_path(const std::string& predictions_dir, std::uint64_t task);
// Writes the part (temporary file, fsync, rename). Errors name the file.
expected<void> write_part(const std::string& predictions_dir, const prediction_part& p);
// Reads and checks one part file (sizes agree with the header). Errors name the file.
expected<prediction_part> read_part(const std::string& path);

// The parts of a job's tasks in record order: each task's part read once, `visit`ed in order of
// `first`. Errors: a task without a part (named), parts that overlap or leave a gap in the records.
expected<std::uint64_t> visit_parts(const std::string& predictions_dir,
                                    const std::function<expected<void>(const prediction_part&)>& visit);

// Metrics of predictions against their labels, as troupe's evaluation reports them: mean loss (the
// parts' loss sums over the rows), accuracy, and AUC for a binary model (NaN otherwise).
struct prediction_metrics {
  std::uint64_t rows = 0;
  double loss = 0, accuracy = 0, auc = 0;
  // Rows the model gave no finite output for (their loss makes the mean loss NaN), and the record
  // number of the first.
  std::uint64_t unscored = 0, first_unscored = 0;
};
expected<prediction_metrics> score_parts(const std::string& predictions_dir);

}  // namespace troupe::model
