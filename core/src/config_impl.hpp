// What the two halves of the configuration code share: the document's toml++ table
// (config_doc.cpp: parsing, overrides, printing) and the lookups the readers use (config.cpp).
// toml++ stays out of the public header.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

#include "troupe/core/config.hpp"

namespace troupe {

struct config_doc::impl {
  toml::table table;
  std::string source;
  // Keys set by overrides, with what set them ("--set job.workers=abc"), for error messages: a
  // bad value is the flag's, not the file's.
  std::vector<std::pair<std::string, std::string>> overridden;
};

namespace config_detail {

// "a.b.c" -> {"a", "b", "c"}.
std::vector<std::string> split_key(std::string_view dotted);
// The node at a dotted key; null when absent (or under a non-table).
const toml::node* lookup(const toml::table& t, std::string_view dotted);
// "an integer", "a string", ... for messages.
const char* type_name(const toml::node& n);

}  // namespace config_detail
}  // namespace troupe
