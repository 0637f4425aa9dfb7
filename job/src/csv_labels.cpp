#include "csv_labels.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

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
  ++rows_;
  if (first_line_.find(text) != first_line_.end()) return {};
  if (first_line_.size() == max_classes)
    return bad(line, "label " + shown(text) + " is one class more than " + std::to_string(max_classes) +
                         " (is this column the label?)");
  first_line_.emplace(std::string(text), line);
  return {};
}

bool label_survey::nearly_all_distinct() const {
  const std::size_t n = first_line_.size();
  return n > 100 || (n > 10 && 2 * n > rows_);
}

// Numbers, some with a fraction, nearly all distinct: a regression target. Each became a class
// (4,867 classes for 5,000 rows) and the job ended "ok" at chance accuracy.
expected<void> label_survey::check_not_continuous() const {
  if (!nearly_all_distinct()) return {};
  const std::pair<const std::string, std::size_t>* fraction = nullptr;
  for (const auto& entry : first_line_) {
    double v = 0;
    if (!as_double(entry.first, v)) return {};
    if (!fraction && v != std::floor(v)) fraction = &entry;
  }
  if (!fraction) return {};
  return bad(fraction->second, std::to_string(first_line_.size()) + " distinct numbers in " +
                                   std::to_string(rows_) + " rows, such as " + shown(fraction->first) +
                                   ": this looks like a continuous target, and troupe trains classifiers "
                                   "(labels are class ids or names); bin it into classes first, or "
                                   "name another column with --label");
}

// Class ids keep their meaning: say so when that leaves classes without rows, or when nearly
// every row has an id of its own.
void label_survey::note_ids(std::uint32_t num_classes, label_classes& out) const {
  const std::string what = file_ + ": " + column_ + ": ";
  if (nearly_all_distinct()) {
    out.notes.push_back(what + std::to_string(first_line_.size()) + " distinct class ids in " +
                        std::to_string(rows_) +
                        " rows: is this a continuous target? troupe trains classifiers");
    return;
  }
  std::vector<std::uint32_t> empty;
  for (std::uint32_t id = 0; id < num_classes; ++id)
    if (first_line_.find(std::to_string(id)) == first_line_.end()) empty.push_back(id);
  if (empty.empty() || first_line_.size() != num_classes - empty.size()) return;
  std::string ids;
  for (std::size_t i = 0; i < empty.size() && i < 5; ++i) ids += (i ? ", " : "") + std::to_string(empty[i]);
  if (empty.size() > 5) ids += ", ...";
  out.notes.push_back(what + "class " + ids + (empty.size() == 1 ? " has" : " have") +
                      " no rows: labels that are class ids keep their meaning, so the model has " +
                      std::to_string(num_classes) + " classes; number the labels from 0 for one of " +
                      std::to_string(num_classes - empty.size()));
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
    note_ids(out.num_classes, out);
    return out;
  }
  if (auto c = check_not_continuous(); !c) return c.err();
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
