// docs/wire_format.md against transport/schema/*.capnp: every struct of the schemas has a row in
// one of the doc's tables (`| `Struct` | `field`, `field`, ... | meaning |`) that names exactly
// its fields (union members and named unions/groups included), and the doc has no row for a
// struct, nor names a field, that no schema has. Fails when one changes without the other.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace troupe {
namespace {

namespace fs = std::filesystem;
using field_map = std::map<std::string, std::set<std::string>>;  // struct -> its field names

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Structs and their fields from one schema file: `struct Name {` opens a struct (nested ones
// too); `name @N` is a field or union member of the innermost struct; `name :union {` / `name
// :group {` is a named union or group of it, whose members belong to that struct as well.
void parse_schema(const std::string& text, field_map& out) {
  static const std::regex open_struct(R"(^\s*struct\s+(\w+)\s*\{)");
  static const std::regex named_group(R"(^\s*(\w+)\s*:(union|group)\s*\{)");
  static const std::regex field(R"(^\s*(\w+)\s+@\d+)");
  std::vector<std::string> scopes;  // struct name, or "" for an anonymous union / group
  std::istringstream in(text);
  std::string line;
  auto current = [&]() -> std::string {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it)
      if (!it->empty()) return *it;
    return {};
  };
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::smatch m;
    if (std::regex_search(line, m, open_struct)) {
      scopes.push_back(m[1]);
      out[m[1]];
    } else if (std::regex_search(line, m, named_group)) {
      out[current()].insert(m[1]);
      scopes.push_back("");
    } else if (line.find('{') != std::string::npos) {
      scopes.push_back("");
    } else if (std::regex_search(line, m, field) && !current().empty()) {
      out[current()].insert(m[1]);
    }
    for (char c : line)
      if (c == '}' && !scopes.empty()) scopes.pop_back();
  }
}

field_map schema_fields() {
  field_map out;
  for (const auto& e : fs::directory_iterator(TROUPE_SCHEMA_DIR))
    if (e.path().extension() == ".capnp") parse_schema(slurp(e.path()), out);
  return out;
}

// Table rows of the doc whose first cell is one backticked identifier starting with a capital:
// the struct, and the backticked names of its second cell.
field_map doc_fields(std::vector<std::string>& duplicates) {
  static const std::regex row(R"(^\|\s*`([A-Z]\w*)`\s*\|([^|]*)\|)");
  static const std::regex name(R"(`(\w+)`)");
  field_map out;
  std::istringstream in(slurp(TROUPE_WIRE_DOC));
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    std::string s = m[1], cell = m[2];
    if (out.count(s)) duplicates.push_back(s);
    auto& f = out[s];
    for (std::sregex_iterator it(cell.begin(), cell.end(), name), end; it != end; ++it) f.insert((*it)[1]);
  }
  return out;
}

TEST(wire_doc, the_schema_parser_finds_structs_fields_and_unions) {
  field_map f;
  parse_schema(R"(struct A {
  x @0 :UInt64;   # a comment with y @9
  union {
    b @1 :Void;
    c @2 :Text;
  }
  g :union {
    d @3 :Void;
  }
  struct Inner {
    e @0 :Bool;
  }
  h @4 :Inner;
}
)",
               f);
  EXPECT_EQ(f["A"], (std::set<std::string>{"x", "b", "c", "g", "d", "h"}));
  EXPECT_EQ(f["Inner"], (std::set<std::string>{"e"}));
}

TEST(wire_doc, every_schema_struct_and_field_is_documented_and_nothing_else) {
  auto schema = schema_fields();
  ASSERT_GT(schema.size(), 10u) << "schemas not found in " << TROUPE_SCHEMA_DIR;
  std::vector<std::string> duplicates;
  auto doc = doc_fields(duplicates);
  EXPECT_TRUE(duplicates.empty()) << "structs with more than one row: " << ::testing::PrintToString(duplicates);
  for (const auto& [s, fields] : schema) {
    auto it = doc.find(s);
    if (it == doc.end()) {
      ADD_FAILURE() << "struct " << s << " has no row in docs/wire_format.md";
      continue;
    }
    for (const auto& f : fields)
      if (!it->second.count(f)) ADD_FAILURE() << s << "." << f << " is not documented in docs/wire_format.md";
    for (const auto& f : it->second)
      if (!fields.count(f)) ADD_FAILURE() << "docs/wire_format.md names " << s << "." << f << ", which no schema has";
  }
  for (const auto& [s, fields] : doc)
    if (!schema.count(s)) ADD_FAILURE() << "docs/wire_format.md documents struct " << s << ", which no schema has";
}

}  // namespace
}  // namespace troupe
