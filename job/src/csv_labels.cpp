#include "csv_labels.hpp"

#include <algorithm>
#include <charconv>

namespace troupe::job {

namespace {

bool as_double(std::string_view text, double& out) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && p == text.data() + text.size();
}

// By value when every name is a number (-1 before 1, 2 before 10), else by bytes.
void sort_names(std::vector<std::string>& names) {
  std::vector<std::pair<double, std::string>> keyed(names.size());
  for (std::size_t i = 0; i < names.size(); ++i)
    if (!as_double(names[i], keyed[i].first)) {
      std::sort(names.begin(), names.end());
      return;
    }
  for (std::size_t i = 0; i < names.size(); ++i) keyed[i].second = std::move(names[i]);
  std::sort(keyed.begin(), keyed.end());
  for (std::size_t i = 0; i < keyed.size(); ++i) names[i] = std::move(keyed[i].second);
}

}  // namespace

unexpected label_survey::bad(std::size_t line, const std::string& why) const {
  return make_unexpected(core_errc::invalid_argument,
                         file_ + ":" + std::to_string(line) + ": " + column_ + ": " + why);
}

// One class name on every row: nothing to tell apart, and a model.json of 1 name for 2 classes that
// predict and evaluate refuse. (One class id is a subset of a file whose ids keep their meaning: it
// stays 2 classes, ids 0 and 1.)
unexpected label_survey::one_class() const {
  return make_unexpected(core_errc::invalid_argument,
                         file_ + ": " + column_ + ": every row's label is " +
                             shown(first_line_.begin()->first) +
                             ": a classifier needs rows of at least two classes (is this column the label?)");
}

expected<void> label_survey::add(std::string_view text, std::size_t line) {
  if (first_line_.find(text) != first_line_.end()) return {};
  if (first_line_.size() == max_classes)
    return bad(line, "label " + shown(text) + " is one class more than " + std::to_string(max_classes) +
                         " (is this column the label?)");
  first_line_.emplace(std::string(text), line);
  return {};
}

expected<label_classes> label_survey::decide() const {
  label_classes out;
  std::uint32_t max_id = 1;
  bool ids = true;
  for (const auto& [text, line] : first_line_) {
    std::uint32_t id = 0;
    if (!parse_class_id(text, id)) {
      ids = false;
      break;
    }
    max_id = std::max(max_id, id);
  }
  if (ids) {
    out.num_classes = max_id + 1;
    return out;
  }
  for (const auto& [text, line] : first_line_) {
    if (!is_utf8(text)) return bad(line, "label is not UTF-8 text (class names must be: convert the file)");
    out.names.push_back(text);
  }
  if (out.names.size() == 1) return one_class();
  sort_names(out.names);
  out.num_classes = static_cast<std::uint32_t>(std::max<std::size_t>(2, out.names.size()));
  return out;
}

}  // namespace troupe::job
