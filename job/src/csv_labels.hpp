// The classes of an import's labels, learnt from its first pass over the file (docs/data.md,
// "Labels"): labels that are all class ids (0..65535) keep their meaning; otherwise every distinct
// text is a class, numbered in sorted order (by value when every label is a number, else by the
// text's bytes) and named.
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
};

class label_survey {
 public:
  // `column` ("column 'y' (3)") and `file` name the label in messages.
  label_survey(std::string file, std::string column) : file_(std::move(file)), column_(std::move(column)) {}

  // Error (invalid_argument): a label past the max_classes-th distinct one.
  expected<void> add(std::string_view text, std::size_t line);
  // Error (invalid_argument): a class name that is not UTF-8 text, naming its first line; a single
  // class name on every row.
  expected<label_classes> decide() const;

 private:
  struct hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  unexpected one_class() const;
  unexpected bad(std::size_t line, const std::string& why) const;
  std::string file_, column_;
  std::unordered_map<std::string, std::size_t, hash, std::equal_to<>> first_line_;  // text -> line
};

}  // namespace troupe::job
