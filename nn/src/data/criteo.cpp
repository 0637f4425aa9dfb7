#include <xxhash.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <string_view>

#include "gz_file.hpp"
#include "troupe/nn/data/readers.hpp"
#include "troupe/nn/errc.hpp"

namespace troupe::nn {
namespace {

constexpr std::size_t int_fields = 13;
constexpr std::size_t cat_fields = 26;

// Parses one TSV line into the dataset; returns an empty string or the reason it is malformed.
std::string parse_line(std::string_view line, const criteo_options& o, dataset& d) {
  std::string_view cols[1 + int_fields + cat_fields];
  std::size_t n = 0;
  for (std::size_t pos = 0;;) {
    std::size_t tab = line.find('\t', pos);
    if (n == std::size(cols)) return "more than " + std::to_string(std::size(cols)) + " tab-separated fields";
    cols[n++] = line.substr(pos, tab == std::string_view::npos ? std::string_view::npos : tab - pos);
    if (tab == std::string_view::npos) break;
    pos = tab + 1;
  }
  if (n != std::size(cols)) return std::to_string(n) + " tab-separated fields, expected 40";
  if (cols[0] != "0" && cols[0] != "1") return "label '" + std::string(cols[0]) + "' is not 0 or 1";
  d.labels.push_back(cols[0] == "1" ? 1.0f : 0.0f);
  for (std::size_t i = 0; i < int_fields; ++i) {
    std::string_view c = cols[1 + i];
    long long v = 0;
    if (!c.empty()) {
      auto [p, ec] = std::from_chars(c.data(), c.data() + c.size(), v);
      if (ec != std::errc{} || p != c.data() + c.size())
        return "integer column " + std::to_string(i + 1) + " is '" + std::string(c) + "'";
    }
    double x = static_cast<double>(v);
    d.dense.push_back(static_cast<float>(o.log_transform && x > 0 ? std::log1p(x) : x));
  }
  for (std::size_t f = 0; f < cat_fields; ++f)
    d.sparse.push_back(category_id(cols[1 + int_fields + f], f, o.buckets_per_field));
  return {};
}

}  // namespace

std::uint64_t category_id(std::string_view text, std::size_t field, std::uint64_t buckets) {
  std::uint64_t local = text.empty() ? 0 : 1 + XXH64(text.data(), text.size(), field) % (buckets - 1);
  return field_id(field, buckets, local);
}

expected<dataset> read_criteo_tsv(const std::string& path, const criteo_options& o) {
  if (o.buckets_per_field < 2)
    return make_unexpected(nn_errc::bad_config, "criteo buckets_per_field must be >= 2, got " +
                                                    std::to_string(o.buckets_per_field));
  detail::gz_file f(path);
  if (!f.is_open())
    return make_unexpected(nn_errc::io_error, path + ": cannot open: " + std::strerror(errno));
  dataset d;
  d.info = {"criteo:" + path, int_fields, cat_fields, 2, {}, o.buckets_per_field};
  std::string line;
  std::size_t lineno = 0;
  bool all = true;
  while (f.getline(line)) {
    ++lineno;
    if (line.empty()) continue;
    std::string why = parse_line(line, o, d);
    if (!why.empty()) {  // a line cut short by the end of a truncated gzip is the truncation
      auto problem = f.end_problem();
      return make_unexpected(nn_errc::bad_data,
                             path + ":" + std::to_string(lineno) + ": " + (problem.empty() ? why : problem));
    }
    ++d.rows;
    if (o.max_rows > 0 && d.rows >= o.max_rows) {
      all = false;
      break;
    }
  }
  // Read to the end: a gzip file cut short must not import as a shorter dataset.
  if (auto problem = all ? f.end_problem() : std::string(); !problem.empty())
    return make_unexpected(nn_errc::bad_data,
                           path + ": " + problem + " (after line " + std::to_string(lineno) + ")");
  // A line may have been half-appended before the error; rows counts only complete ones.
  return d;
}

}  // namespace troupe::nn
