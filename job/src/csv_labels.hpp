// The classes of an import's labels, learnt from its first pass over the file (docs/data.md,
// "Labels"): labels that are all class ids (0..65535) keep their meaning; otherwise every distinct
// text is a class, numbered in sorted order (by value when every label is a number, else by the
// text's bytes) and named. troupe trains classifiers: a column of many distinct fractional numbers
// (a continuous target) is refused, and class ids that leave classes empty (1 and 2: three
// classes, class 0 without rows) or that are nearly all distinct are noted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "csv_cells.hpp"
#include "troupe/core/error.hpp"

namespace troupe::job {

struct label_classes {
  std::vector<std::string> names;  // empty: the labels are class ids
  std::uint32_t num_classes = 2;   // ids 0..num_classes-1; at least 2
  std::vector<std::string> notes;  // what the user should look at (not errors)
};

class label_survey {
 public:
  // `column` ("column 'y' (3)") and `file` name the label in messages.
  label_survey(std::string file, std::string column) : file_(std::move(file)), column_(std::move(column)) {}

  // Error (invalid_argument): a label past the max_classes-th distinct one.
  expected<void> add(std::string_view text, std::size_t line);
  // Error (invalid_argument): a class name that is not UTF-8 text, naming its first line; a single
  // class name on every row; numbers that look like a continuous target.
  expected<label_classes> decide() const;

 private:
  struct hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  unexpected one_class() const;
  // Whether the distinct labels are too many to be classes: more than 100, or more than 10 and
  // more than half the rows.
  bool nearly_all_distinct() const;
  expected<void> check_not_continuous() const;
  void note_ids(std::uint32_t num_classes, label_classes& out) const;
  unexpected bad(std::size_t line, const std::string& why) const;
  std::string file_, column_;
  std::unordered_map<std::string, std::size_t, hash, std::equal_to<>> first_line_;  // text -> line
  std::size_t rows_ = 0;
};

}  // namespace troupe::job
