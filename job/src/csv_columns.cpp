#include "csv_columns.hpp"

#include <algorithm>
#include <charconv>
#include <unordered_map>

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

std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

expected<std::unordered_map<std::string, std::size_t>> index_header(const std::vector<std::string>& header,
                                                                    const std::string& where) {
  if (std::all_of(header.begin(), header.end(), is_number))
    return bad(where, "line 1 holds only numbers: a header row naming the columns is required");
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < header.size(); ++i)
    if (!index.emplace(header[i], i).second)
      return bad(where, "header: column name '" + header[i] + "' appears twice (columns " +
                            std::to_string(index[header[i]] + 1) + " and " + std::to_string(i + 1) + ")");
  return index;
}

// Looks `names` up (role: "label", "dense", "sparse"), marking each column taken.
expected<std::vector<std::size_t>> take(const std::vector<std::string>& names, const char* role,
                                        const std::unordered_map<std::string, std::size_t>& index,
                                        std::vector<std::string>& taken, const csv_columns& c,
                                        const std::string& where) {
  std::vector<std::size_t> out;
  for (const auto& n : names) {
    auto it = index.find(n);
    if (it == index.end())
      return bad(where, std::string(role) + " column '" + n +
                            "': no such column (the header has: " + listed(c.names) + ")");
    if (!taken[it->second].empty())
      return bad(where, "column '" + n + "' is given as " + taken[it->second] + " and as " + role);
    taken[it->second] = role;
    out.push_back(it->second);
  }
  return out;
}

}  // namespace

expected<csv_columns> plan_columns(const std::vector<std::string>& header, const std::string& label,
                                   const std::optional<std::vector<std::string>>& dense,
                                   const std::vector<std::string>& sparse, const std::string& where) {
  auto index = index_header(header, where);
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

}  // namespace troupe::job
