#include "csv_pass.hpp"

namespace troupe::job {

expected<csv_pass> csv_pass::open(const std::string& file, char delimiter) {
  auto in = nn::csv_reader::open(file, delimiter);
  if (!in) return in.err();
  csv_pass p(std::move(*in));
  if (!p.in_.next(p.header_)) {
    if (auto f = p.in_.finish(); !f) return f.err();
    return make_unexpected(core_errc::invalid_argument,
                           file + ": empty: a header row naming the columns is required");
  }
  if (!p.header_.malformed.empty())
    return make_unexpected(core_errc::invalid_argument, file + ":" + std::to_string(p.header_.number) +
                                                            ": header: " + p.header_.malformed);
  return p;
}

expected<void> csv_pass::each(const row_fn& fn, malformed_lines* bad) {
  nn::csv_line line;
  while (in_.next(line)) {
    const std::string why = nn::row_problem(line, header_.fields.size());
    if (why.empty()) {
      if (auto r = fn(line); !r) return r;
    } else if (bad) {
      if (bad->examples.size() < bad->max_reported)
        bad->examples.push_back("line " + std::to_string(line.number) + ": " + why);
      ++bad->count;
    }
  }
  return in_.finish();
}

}  // namespace troupe::job
