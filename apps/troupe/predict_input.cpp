#include "predict_input.hpp"

#include <filesystem>

#include "data_csv.hpp"
#include "troupe/job/row_encoder.hpp"
#include "troupe/nn/data/csv_reader.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::cli {

namespace {

namespace fs = std::filesystem;

unexpected unlabelled(const std::string& where) {
  return make_unexpected(core_errc::invalid_argument,
                         where + ": evaluate scores labelled rows (troupe predict takes unlabelled ones)");
}

// The CSV's header line into `line`, placed by the encoder; to evaluate, it must have the label.
expected<void> read_header(const input_options& o, nn::csv_reader& in, job::row_encoder& enc,
                           const storage::row_format& format, bool evaluate, nn::csv_line& line) {
  if (!in.next(line)) {
    if (auto f = in.finish(); !f) return f.err();
    return make_unexpected(core_errc::invalid_argument, o.data + ": no header line (an empty file)");
  }
  const std::string at = o.data + ":" + std::to_string(line.number);
  if (!line.malformed.empty())
    return make_unexpected(core_errc::invalid_argument, at + ": header: " + line.malformed);
  if (auto h = enc.use_header(line.fields); !h) return std::move(h).err().wrap(at);
  if (evaluate && std::find(line.fields.begin(), line.fields.end(), format.label) == line.fields.end())
    return unlabelled(at + ": no label column '" + format.label + "' in the header");
  return {};
}

// A line that does not encode may be the file's last, cut short with its gzip stream: the
// truncation is then the error (as the import says it), not the half line.
error line_error(nn::csv_reader& in, unexpected e) {
  nn::csv_line next;
  if (!in.next(next))
    if (auto f = in.finish(); !f) return f.err();
  return std::move(e.err);
}

// The rows after the header line `line` into `w`: their line numbers into out.numbers, the rows a
// skip-row model cannot score counted in `out`.
expected<void> encode_rows(const input_options& o, nn::csv_reader& in, const job::row_encoder& enc,
                           bool evaluate, std::size_t width, storage::record_writer& w, input& out) {
  const auto at = [&o](std::size_t n) { return o.data + ":" + std::to_string(n); };
  nn::csv_line line;
  storage::record r;
  for (std::uint64_t record = 0; in.next(line);) {
    // Malformed (bad quoting, a field count other than the header's): refused, or with
    // --skip-malformed dropped and counted, as the import does.
    const std::string why = nn::row_problem(line, width);
    if (!why.empty() && o.skip_malformed) {
      if (out.malformed_examples.size() < 5)
        out.malformed_examples.push_back("line " + std::to_string(line.number) + ": " + why);
      ++out.malformed;
      continue;
    }
    if (!line.malformed.empty())
      return line_error(in, make_unexpected(core_errc::invalid_argument,
                                            at(line.number) + ": malformed line: " + line.malformed));
    auto e = enc.encode_fields(line.fields, r, at(line.number));
    if (!e) return line_error(in, make_unexpected(e.err()));
    if (e->dropped) {
      if (out.skipped++ == 0)
        out.first_skipped = "line " + std::to_string(line.number) + ", column '" + e->dropped_column + "'";
      continue;
    }
    if (evaluate && !e->labelled)
      return line_error(in, unlabelled(at(line.number) + ": column '" + enc.format().label + "': no label"));
    if (out.numbers.of(record) != line.number) out.numbers.jumps.emplace_back(record, line.number);
    if (auto a = w.append(r); !a) return a.err();
    ++record;
  }
  return {};
}

// A CSV file's rows (a header line, then one row a line) encoded as the model's training data was
// imported (model.json's columns: the same hash, standardization and missing-value rules), into a
// record store in the prediction job's directory. Read as the import reads a file (nn::csv_reader:
// gzipped or not, quoted fields, \r\n, a byte order mark, blank lines skipped). Every line must
// encode: the first that does not is an error naming its line and column, before any node starts.
// To evaluate, every row must have a label (the header the label column).
expected<input> csv_store(const input_options& o, const model::model_info& m, const std::string& dir,
                          bool evaluate) {
  auto format = model::row_format_of(m);
  if (!format) return format.err();
  if (!o.delimiter.empty() && !parse_delimiter(o.delimiter, format->delimiter))
    return make_unexpected(core_errc::invalid_argument,
                           "--delimiter '" + o.delimiter + "': expected one character (or tab), not a quote");
  auto enc = job::row_encoder::create(*format, m.dir + "/model.json", static_cast<std::uint32_t>(m.classes));
  if (!enc) return enc.err();
  if (!evaluate) enc->ignore_label();  // predicting needs no labels: a value no class refused the file
  enc->skip_dropped_rows();
  auto in = nn::csv_reader::open(o.data, format->delimiter);
  if (!in) return in.err();
  nn::csv_line line;
  if (auto h = read_header(o, *in, *enc, *format, evaluate, line); !h) return h.err();
  storage::record_schema schema{static_cast<std::uint32_t>(m.dense_dim),
                                static_cast<std::uint32_t>(m.fields),
                                static_cast<std::uint32_t>(m.classes),
                                {},
                                m.buckets_per_field};
  auto w = storage::record_writer::create(dir, schema, "predict:" + o.data);
  if (!w) return w.err();
  input out{dir, true, {line.number + 1, {}, true}, 0, {}, 0, {}};
  if (auto rows = encode_rows(o, *in, *enc, evaluate, line.fields.size(), *w, out); !rows) return rows.err();
  if (auto f = in->finish(); !f) return f.err();
  if (out.malformed > 0 && w->count() == 0 && out.skipped == 0)
    return make_unexpected(
        core_errc::invalid_argument,
        o.data + ": every line is malformed (" + out.malformed_examples.front() + "): nothing to score");
  if (out.skipped > 0 && w->count() == 0)
    return make_unexpected(core_errc::invalid_argument,
                           o.data +
                               ": every row has a missing value, and the model was trained with --missing "
                               "skip-row (its rows had none): nothing to score");
  if (w->count() == 0)  // a header alone (a filtered export that matched nothing): no job to start
    return make_unexpected(core_errc::invalid_argument, o.data + ": a header and no rows: nothing to score");
  if (auto f = w->finish(); !f) return f.err();
  return out;
}

}  // namespace

namespace {
// Why --data, not a regular file, is no record store either; "" when it is one.
std::string not_a_store(const input_options& o) {
  std::error_code ec;
  const auto st = fs::status(o.data, ec);
  if (!fs::exists(st)) return "--data " + o.data + ": no such file or directory";
  if (!fs::is_directory(st))  // /dev/stdin, <(zcat f): read to its end, nothing to read again
    return "--data " + o.data + ": a pipe or a device, not a file: give a CSV file or a record store";
  if (!fs::is_regular_file(o.data + "/data.mdb", ec))
    return "--data " + o.data + ": neither a CSV file nor a record store (no data.mdb)";
  return "";
}
}  // namespace

expected<input> input_store(const input_options& o, const model::model_info& m, const std::string& job_dir,
                            bool evaluate) {
  std::error_code ec;
  if (fs::is_regular_file(o.data, ec)) return csv_store(o, m, job_dir + "/input", evaluate);
  if (auto why = not_a_store(o); !why.empty()) return make_unexpected(core_errc::invalid_argument, why);
  auto s = storage::record_store::open_read_only(o.data);
  if (!s) return s.err();
  const auto& sc = s->info().schema;
  if (sc.dense_dim != m.dense_dim || sc.sparse_fields != m.fields)
    return make_unexpected(core_errc::invalid_argument,
                           "--data " + o.data + ": rows of " + std::to_string(sc.dense_dim) +
                               " dense values and " + std::to_string(sc.sparse_fields) +
                               " sparse fields; the model (" + m.dir + "/model.json) takes " +
                               std::to_string(m.dense_dim) + " and " + std::to_string(m.fields));
  if (evaluate && sc.num_classes != m.classes)
    return make_unexpected(core_errc::invalid_argument, "--data " + o.data + ": labels of " +
                                                            std::to_string(sc.num_classes) +
                                                            " classes; the model (" + m.dir +
                                                            "/model.json) has " + std::to_string(m.classes));
  if (s->count() == 0)
    return make_unexpected(core_errc::invalid_argument,
                           "--data " + o.data + ": the store holds no records: nothing to score");
  // Rows of the model's shape encoded otherwise (another standardization, classes numbered anew by
  // another import) read as other values: scored silently wrong (accuracy 0.51 for 0.97).
  if (auto trained = model::row_format_of(m); trained && s->info().columns)
    if (auto d = storage::encoding_difference(*trained, *s->info().columns,
                                              "the model's training rows (" + m.dir + "/model.json)",
                                              "--data " + o.data, {evaluate, true});
        !d.empty())
      return make_unexpected(
          core_errc::invalid_argument,
          "--data " + o.data + ": its rows are encoded otherwise than the model's: " + d +
              " (give the CSV file, which troupe encodes as the model's rows were, or import "
              "it with `troupe data import csv --like " +
              m.dir + "`)");
  return input{fs::absolute(o.data).lexically_normal().string(), false, {}, 0, {}, 0, {}};
}

}  // namespace troupe::cli
