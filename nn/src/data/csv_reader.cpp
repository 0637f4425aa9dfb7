#include "troupe/nn/data/csv_reader.hpp"

#include <cerrno>
#include <cstring>

#include "gz_file.hpp"

namespace troupe::nn {

namespace {
// Reads the quoted field starting at line[pos] (a quote) into `field`; returns the position after
// its closing quote, or npos when the line ends inside the quotes.
std::size_t read_quoted(std::string_view line, std::size_t pos, std::string& field) {
  for (std::size_t i = pos + 1; i < line.size(); ++i) {
    if (line[i] != '"') {
      field += line[i];
    } else if (i + 1 < line.size() && line[i + 1] == '"') {
      field += '"';
      ++i;
    } else {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

std::string column(std::size_t pos) {
  return "character " + std::to_string(pos + 1);
}
}  // namespace

std::string split_delimited(std::string_view line, char delimiter, std::vector<std::string>& fields) {
  fields.clear();
  for (std::size_t pos = 0;;) {
    std::string& f = fields.emplace_back();
    if (pos < line.size() && line[pos] == '"') {
      std::size_t end = read_quoted(line, pos, f);
      if (end == std::string_view::npos) return "a quoted field opened at " + column(pos) + " is not closed";
      if (end < line.size() && line[end] != delimiter)
        return "text after the closing quote at " + column(end - 1);
      if (end == line.size()) return {};
      pos = end + 1;
      continue;
    }
    std::size_t end = std::min(line.find(delimiter, pos), line.size());
    std::string_view text = line.substr(pos, end - pos);
    if (auto q = text.find('"'); q != std::string_view::npos)
      return "a quote inside an unquoted field at " + column(pos + q);
    f.assign(text);
    if (end == line.size()) return {};
    pos = end + 1;
  }
}

std::string row_problem(const csv_line& line, std::size_t width) {
  if (!line.malformed.empty() || line.fields.size() == width) return line.malformed;
  return std::to_string(line.fields.size()) + " fields, the header has " + std::to_string(width);
}

expected<csv_reader> csv_reader::open(const std::string& path, char delimiter) {
  csv_reader r;
  r.file_ = std::make_unique<detail::gz_file>(path);
  if (!r.file_->is_open())
    return make_unexpected(core_errc::io_error, path + ": cannot open: " + std::strerror(errno));
  r.path_ = path;
  r.delimiter_ = delimiter;
  return r;
}

csv_reader::csv_reader(csv_reader&&) noexcept = default;
csv_reader& csv_reader::operator=(csv_reader&&) noexcept = default;
csv_reader::~csv_reader() = default;

namespace {
// Empty, or only spaces and tabs that are not the delimiter: what a person calls a blank line (one
// of spaces read as "1 fields, the header has 7").
bool blank(const std::string& line, char delimiter) {
  for (char c : line)
    if ((c != ' ' && c != '\t') || c == delimiter) return false;
  return true;
}
}  // namespace

bool csv_reader::next(csv_line& out) {
  while (file_->getline(buf_)) {
    ++line_;
    if (line_ == 1 && buf_.rfind("\xEF\xBB\xBF", 0) == 0) buf_.erase(0, 3);
    if (blank(buf_, delimiter_)) continue;
    out.number = line_;
    out.malformed = split_delimited(buf_, delimiter_, out.fields);
    if (auto nul = buf_.find('\0'); nul != std::string::npos)
      out.malformed = "a NUL byte at " + column(nul) + " (is this a text file?)";
    else if (line_ == 1 && buf_.find('\r') != std::string::npos)
      out.malformed =
          "a carriage return inside the line: are the line endings CR alone (classic Mac)? "
          "convert them to LF (tr '\\r' '\\n')";
    return true;
  }
  return false;
}

expected<void> csv_reader::finish() {
  if (auto problem = file_->end_problem(); !problem.empty())
    return make_unexpected(core_errc::io_error,
                           path_ + ": " + problem + " (after line " + std::to_string(line_) + ")");
  return {};
}

}  // namespace troupe::nn
