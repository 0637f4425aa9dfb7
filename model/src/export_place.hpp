// Where an export writes: a fresh directory beside the model directory's place, moved into it in one
// rename when complete (an existing model swapped out with RENAME_EXCHANGE, then removed), removed
// if the export fails (the destructor). A reader of the place sees a whole model or, the first time,
// none.
#pragma once

#include <string>

#include "troupe/core/error.hpp"

namespace troupe::model {

class export_place {
 public:
  explicit export_place(std::string dir);
  ~export_place();
  export_place(const export_place&) = delete;
  export_place& operator=(const export_place&) = delete;

  // Makes the temporary directory (the place's parent must exist or be creatable). Refuses
  // (invalid_argument) a place that exists and is not an empty or model directory (one holding
  // only model.json, model.pt and state): an export never removes a user's files.
  expected<void> begin();
  const std::string& tmp() const { return tmp_; }
  const std::string& final_dir() const { return dir_; }
  // Moves the temporary directory into place. Errors name both paths.
  expected<void> commit();

 private:
  std::string dir_, tmp_;
  bool committed_ = false;
};

}  // namespace troupe::model
