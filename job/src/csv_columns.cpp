#include "csv_columns.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <unordered_map>

#include "csv_cells.hpp"

namespace troupe::job {

namespace {

unexpected bad(const std::string& where, const std::string& why) {
  return make_unexpected(core_errc::invalid_argument, where + ": " + why);
}

bool is_number(const std::string& s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && ec == std::errc{} && p == s.data() + s.size();
}

expected<std::unordered_map<std::string, std::size_t>> index_header(const std::vector<std::string>& header,
                                                                    const std::string& where) {
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < header.size(); ++i)
    if (!index.emplace(header[i], i).second)
      return bad(where, "column name " + shown(header[i]) + " appears twice (columns " +
                            std::to_string(index[header[i]] + 1) + " and " + std::to_string(i + 1) + ")");
  return index;
}

// The header's name that `n` is but for case and blanks around it (" Age " for "age"), when one is:
// the blanks are all but invisible in the header's list.
std::string near_name(const std::string& n, const std::vector<std::string>& names) {
  auto folded = [](const std::string& s) {
    std::string t(trimmed(s));
    std::transform(t.begin(), t.end(), t.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    return t;
  };
  const auto want = folded(n);
  for (const auto& h : names)
    if (h != n && folded(h) == want) return h;
  return {};
}

// A header read as one column that holds another common separator: the file's delimiter is not
// the one given ("no such column" alone left the user to find it).
std::string delimiter_hint(const std::vector<std::string>& names) {
  if (names.size() != 1) return "";
  for (char d : {',', ';', '\t', '|'})
    if (names[0].find(d) != std::string::npos) {
      const std::string flag = d == '\t' ? std::string("tab") : std::string{'\'', d, '\''};
      return "; the header reads as one column: is the file separated by " + flag + "? (--delimiter " + flag +
             ")";
    }
  return "";
}

// Looks `names` up (role: "label", "dense", "sparse"), marking each column taken.
expected<std::vector<std::size_t>> take(const std::vector<std::string>& names, const char* role,
                                        const std::unordered_map<std::string, std::size_t>& index,
                                        std::vector<std::string>& taken, const csv_columns& c,
                                        const std::string& where) {
  std::vector<std::size_t> out;
  for (const auto& n : names) {
    auto it = index.find(n);
    if (it == index.end()) {
      const auto near = near_name(n, c.names);
      return bad(where, std::string(role) + " column '" + n + "': no such column" +
                            (near.empty() ? "" : "; did you mean '" + near + "'?") +
                            " (the header has: " + joined(c.names, ", ") + ")" + delimiter_hint(c.names));
    }
    if (!taken[it->second].empty())
      return bad(where, "column '" + n + "' is given as " + taken[it->second] + " and as " + role);
    taken[it->second] = role;
    out.push_back(it->second);
  }
  return out;
}

expected<void> check_header(const std::vector<std::string>& header, const std::string& where) {
  if (std::all_of(header.begin(), header.end(), is_number))
    return bad(where, "line 1 holds only numbers: a header row naming the columns is required");
  constexpr std::size_t longest = 1024;
  for (std::size_t i = 0; i < header.size(); ++i) {
    if (trimmed(header[i]).empty())
      return bad(where, "header: column " + std::to_string(i + 1) + " has no name (every column needs one)");
    if (header[i].size() > longest)
      return bad(where, "header: the name of column " + std::to_string(i + 1) + " is " +
                            std::to_string(header[i].size()) + " bytes long (at most " +
                            std::to_string(longest) + "): is line 1 a header?");
  }
  for (std::size_t i = 0; i < header.size(); ++i)
    if (!is_utf8(header[i]))
      return bad(where, "header: the name of column " + std::to_string(i + 1) +
                            " is not UTF-8 text (store names must be: convert the file, e.g. iconv -f latin1 "
                            "-t utf-8)");
  return {};
}

}  // namespace

expected<csv_columns> plan_columns(const std::vector<std::string>& header, const std::string& label,
                                   const std::optional<std::vector<std::string>>& dense,
                                   const std::vector<std::string>& sparse, const std::string& where) {
  if (auto h = check_header(header, where); !h) return h.err();
  auto index = index_header(header, where + ": header");
  if (!index) return index.err();
  csv_columns c;
  c.names = header;
  std::vector<std::string> taken(header.size());
  auto l = take({label}, "label", *index, taken, c, where);
  if (!l) return l.err();
  c.label = l->front();
  auto s = take(sparse, "sparse", *index, taken, c, where);
  if (!s) return s.err();
  c.sparse = std::move(*s);
  if (dense) {
    auto d = take(*dense, "dense", *index, taken, c, where);
    if (!d) return d.err();
    c.dense = std::move(*d);
  }
  for (std::size_t i = 0; i < header.size(); ++i)
    if (taken[i].empty()) (dense ? c.ignored : c.dense).push_back(i);
  return c;
}

std::string joined(const std::vector<std::string>& names, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) out += (i ? sep : "") + names[i];
  return out;
}

expected<csv_columns> bind_columns(const std::vector<std::string>& header, const storage::row_format& f,
                                   const std::string& where) {
  auto index = index_header(header, where);
  if (!index) return index.err();
  csv_columns c;
  c.names = header;
  if (auto it = index->find(f.label); it != index->end()) c.label = it->second;
  std::vector<std::string> taken(header.size());
  auto d = take(f.dense, "dense", *index, taken, c, where);
  if (!d) return d.err();
  auto s = take(f.sparse, "sparse", *index, taken, c, where);
  if (!s) return s.err();
  c.dense = std::move(*d);
  c.sparse = std::move(*s);
  return c;
}

}  // namespace troupe::job
