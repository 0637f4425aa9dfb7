#include "troupe/job/row_encoder.hpp"

#include <unordered_map>

#include "csv_row.hpp"
#include "troupe/nn/data/csv_reader.hpp"

namespace troupe::job {

namespace {

unexpected bad(const std::string& where, const std::string& why) {
  return make_unexpected(core_errc::invalid_argument, where + (where.empty() ? "" : ": ") + why);
}

// Where raw rows have their columns when nobody says: the imported file's header, else the label,
// the dense and the sparse columns in that order.
std::vector<std::string> default_header(const storage::row_format& f) {
  if (!f.header.empty()) return f.header;
  std::vector<std::string> h{f.label};
  h.insert(h.end(), f.dense.begin(), f.dense.end());
  h.insert(h.end(), f.sparse.begin(), f.sparse.end());
  return h;
}

expected<encoded_row> encode(const std::vector<std::string>& fields, const row_codec& c, storage::record& r,
                             const std::string& where, bool skip_dropped) {
  auto out = to_record(fields, c, r, where, 0);
  if (!out) return out.err();
  if (!out->kept && skip_dropped)
    return encoded_row{out->labelled, true, c.cols.names[out->missing_column], 0};
  if (!out->kept)
    return bad(where, "column '" + c.cols.names[out->missing_column] +
                          "': missing value (the import dropped rows with one: --missing skip-row)");
  return encoded_row{out->labelled, false, {}, static_cast<std::uint32_t>(out->filled)};
}

}  // namespace

struct row_encoder::impl {
  storage::row_format format;
  row_codec lines;  // positions in the header of the lines
  row_codec cells;  // positions in default_header(format)
  std::unordered_map<std::string, std::size_t> cell_index;
  bool ignore_label = false, skip_dropped = false;
  std::uint32_t num_classes = 0;
};

row_encoder::row_encoder(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
row_encoder::row_encoder(row_encoder&&) noexcept = default;
row_encoder& row_encoder::operator=(row_encoder&&) noexcept = default;
row_encoder::~row_encoder() = default;

expected<row_encoder> row_encoder::create(const storage::row_format& f, const std::string& where,
                                          std::uint32_t num_classes) {
  auto header = default_header(f);
  auto codec = make_codec(f, header, false, where);
  if (!codec) return codec.err();
  auto p = std::make_unique<impl>();
  p->format = f;
  p->num_classes = num_classes;
  codec->import = false;
  codec->labels->limit(num_classes);
  p->lines = *codec;
  p->cells = std::move(*codec);
  p->cells.positions = false;  // a /rows object's cells have names, no order
  for (std::size_t i = 0; i < header.size(); ++i) p->cell_index.emplace(header[i], i);
  return row_encoder(std::move(p));
}

expected<row_encoder> row_encoder::from_manifest(const storage::manifest& m, const std::string& where) {
  if (!m.columns)
    return bad(where,
               "not a store imported from CSV (its manifest has no [columns]; source: " + m.source + ")");
  return create(*m.columns, where, m.schema.num_classes);
}

const storage::row_format& row_encoder::format() const {
  return impl_->format;
}

expected<void> row_encoder::use_header(const std::vector<std::string>& header) {
  auto codec = make_codec(impl_->format, header, false, "header");
  if (!codec) return codec.err();
  codec->import = false;
  codec->labels->limit(impl_->num_classes);
  impl_->lines = std::move(*codec);
  if (impl_->ignore_label) impl_->lines.cols.label.reset();
  return {};
}

void row_encoder::ignore_label() {
  impl_->ignore_label = true;
  impl_->lines.cols.label.reset();
  impl_->cells.cols.label.reset();
}

void row_encoder::skip_dropped_rows() {
  impl_->skip_dropped = true;
}

expected<encoded_row> row_encoder::encode_line(std::string_view line, storage::record& r,
                                               const std::string& where) const {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  std::vector<std::string> fields;
  if (auto why = nn::split_delimited(line, impl_->format.delimiter, fields); !why.empty())
    return bad(where, "malformed line: " + why);
  return encode_fields(fields, r, where);
}

expected<encoded_row> row_encoder::encode_fields(const std::vector<std::string>& fields, storage::record& r,
                                                 const std::string& where) const {
  const auto width = impl_->lines.cols.names.size();
  if (fields.size() != width)
    return bad(where, std::to_string(fields.size()) + " fields, the header has " + std::to_string(width));
  return encode(fields, impl_->lines, r, where, impl_->skip_dropped);
}

expected<encoded_row> row_encoder::encode_cells(const std::vector<std::pair<std::string, std::string>>& cells,
                                                storage::record& r, const std::string& where) const {
  const auto& c = impl_->cells;
  std::vector<std::string> fields(c.cols.names.size());
  std::vector<bool> given(fields.size());
  for (const auto& [name, value] : cells) {
    auto it = impl_->cell_index.find(name);
    if (it == impl_->cell_index.end()) continue;
    fields[it->second] = value;
    given[it->second] = true;
  }
  for (const auto* cols : {&c.cols.dense, &c.cols.sparse})
    for (auto i : *cols)
      if (!given[i]) return bad(where, "missing column '" + c.cols.names[i] + "'");
  return encode(fields, c, r, where, impl_->skip_dropped);
}

}  // namespace troupe::job
