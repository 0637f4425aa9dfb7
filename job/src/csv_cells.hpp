// One cell of a CSV row as `troupe data import csv` reads it (docs/data.md, "Your own CSV data"):
// what counts as a missing value, a number, a class id; and the class ids of label text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe::job {

inline constexpr std::uint32_t max_class_id = 65535;
inline constexpr std::size_t max_classes = max_class_id + 1;

// Without the spaces and tabs around it.
std::string_view trimmed(std::string_view s);

// A label or dense cell (trimmed) that holds no value: empty, or, in any case, nan, +nan, -nan, na,
// n/a or null (what pandas, R, numpy and databases write for one).
bool is_missing(std::string_view text);

// An integer 0..max_class_id written in digits.
bool parse_class_id(std::string_view text, std::uint32_t& out);

// A cell's text quoted for a message: 'text', cut to its first 60 bytes (and its length said) when
// longer, so that a 10 MB cell does not make a 10 MB error line.
std::string shown(std::string_view text);

// A finite number (`1e-3`, `-2.5`; not `inf`).
bool parse_number(std::string_view text, float& out);
// Why parse_number refused `text`: "'1e39' is beyond FP32's range (...)" for a finite double a
// float cannot hold, else "'x' is not a number".
std::string not_a_number(std::string_view text);

// Which class a label's text is: numeric (the text is a class id) or one of the names of an
// import's string labels (class i is names[i]).
class label_codec {
 public:
  label_codec() = default;
  explicit label_codec(std::vector<std::string> names);

  bool named() const { return !names_.empty(); }
  // Class ids from `num_classes` up are no class (a model's or a store's classes; 0: any id is).
  void limit(std::uint32_t num_classes) { limit_ = num_classes; }
  // False when `text` (trimmed) is no class.
  bool id(std::string_view text, float& out) const;
  // What a label must be, for messages: "a class id (...)" or "one of the 3 classes (a, b, c)".
  std::string expected_text() const;

 private:
  struct hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> names_;
  std::unordered_map<std::string, std::uint32_t, hash, std::equal_to<>> ids_;
  std::uint32_t limit_ = 0;
};

// Whether `s` is well-formed UTF-8 (what a manifest's TOML can hold).
bool is_utf8(std::string_view s);

}  // namespace troupe::job
