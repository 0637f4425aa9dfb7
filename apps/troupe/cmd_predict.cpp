// `troupe predict MODEL --data FILE.csv|STORE --out FILE` and `troupe evaluate MODEL --data ...`: batch
// inference as an elastic job (ElasticDL's prediction mode; docs/model_format.md, "Predicting").
// The rows are the job's tasks; workers run the model (its model.pt, through the TorchScript
// plugin) on them and write each task's output before reporting it done, so a killed worker's task
// is redone and every input row appears in the output once, in input order. predict writes one CSV
// line per row (its CSV line or record number, the probabilities, the class of a multi-class model); evaluate
// prints the metrics troupe's own evaluation reports (loss, accuracy, AUC) as one JSON line.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "data_csv.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/control/runner.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/job/row_encoder.hpp"
#include "troupe/model/model_dir.hpp"
#include "troupe/model/predictions.hpp"
#include "troupe/nn/data/csv_reader.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::cli {
namespace {

namespace fs = std::filesystem;

struct options {
  std::string model, data, out, root = "jobs", job_id;
  std::string delimiter;  // a CSV's; empty: the import's (model.json's columns.delimiter)
  std::uint32_t workers = 2;
  std::uint64_t records_per_task = 4096;
  std::size_t batch = 1024;
  int threads = 1;
  bool quiet = false;
};

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump();  // a JSON string is a TOML basic string
}

// The number the output gives each row: its record number (a store), or its CSV line (the header
// is line 1; blank lines are skipped, so the lines of the rows after one jump: `jumps` holds the
// record where each jump lands and its line).
struct row_numbers {
  std::uint64_t first = 0;  // the number of record 0 when there are no jumps
  std::vector<std::pair<std::uint64_t, std::uint64_t>> jumps;
  bool lines = false;  // CSV lines, not records
  std::uint64_t of(std::uint64_t record) const {
    auto it = std::upper_bound(jumps.begin(), jumps.end(), record,
                               [](std::uint64_t r, const auto& j) { return r < j.first; });
    return it == jumps.begin() ? first + record : std::prev(it)->second + (record - std::prev(it)->first);
  }
};

struct input {
  std::string store;
  row_numbers numbers;
  // Rows with a missing value that a model trained with --missing skip-row cannot score (its
  // training rows had none): skipped, as the import skipped them; the first one's line and column.
  std::uint64_t skipped = 0;
  std::string first_skipped;
};

unexpected unlabelled(const std::string& where) {
  return make_unexpected(core_errc::invalid_argument,
                         where + ": evaluate scores labelled rows (troupe predict takes unlabelled ones)");
}

// The CSV's header line into `line`, placed by the encoder; to evaluate, it must have the label.
expected<void> read_header(const options& o, nn::csv_reader& in, job::row_encoder& enc,
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
expected<void> encode_rows(const options& o, nn::csv_reader& in, const job::row_encoder& enc, bool evaluate,
                           storage::record_writer& w, input& out) {
  const auto at = [&o](std::size_t n) { return o.data + ":" + std::to_string(n); };
  nn::csv_line line;
  storage::record r;
  for (std::uint64_t record = 0; in.next(line);) {
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
expected<input> csv_store(const options& o, const model::model_info& m, const std::string& dir,
                          bool evaluate) {
  auto format = model::row_format_of(m);
  if (!format) return format.err();
  if (!o.delimiter.empty() && !parse_delimiter(o.delimiter, format->delimiter))
    return make_unexpected(core_errc::invalid_argument,
                           "--delimiter '" + o.delimiter + "': expected one character (or tab), not a quote");
  auto enc = job::row_encoder::create(*format, m.dir + "/model.json");
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
  input out{dir, {line.number + 1, {}, true}, 0, {}};
  if (auto rows = encode_rows(o, *in, *enc, evaluate, *w, out); !rows) return rows.err();
  if (auto f = in->finish(); !f) return f.err();
  if (out.skipped > 0 && w->count() == 0)
    return make_unexpected(core_errc::invalid_argument,
                           o.data +
                               ": every row has a missing value, and the model was trained with --missing "
                               "skip-row (its rows had none): nothing to score");
  if (auto f = w->finish(); !f) return f.err();
  return out;
}

// The input checked against the model before anything runs: a record store of the model's shape,
// or a CSV file encoded into one (csv_store) in the job's directory `job_dir`.
expected<input> input_store(const options& o, const model::model_info& m, const std::string& job_dir,
                            bool evaluate) {
  std::error_code ec;
  if (fs::is_regular_file(o.data, ec)) return csv_store(o, m, job_dir + "/input", evaluate);
  if (!fs::is_regular_file(o.data + "/data.mdb", ec))
    return make_unexpected(core_errc::invalid_argument,
                           "--data " + o.data + ": neither a CSV file nor a record store (no data.mdb)");
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
  return input{fs::absolute(o.data).lexically_normal().string(), {}, 0, {}};
}

// --out before anything runs: not a directory, in one that exists.
expected<void> writable(const std::string& out) {
  std::error_code ec;
  if (fs::is_directory(out, ec))
    return make_unexpected(core_errc::invalid_argument, "--out " + out + ": a directory (give a file name)");
  auto parent = fs::path(out).parent_path();
  if (parent.empty()) parent = ".";
  if (!fs::is_directory(parent, ec) || ::access(parent.c_str(), W_OK) != 0)
    return make_unexpected(core_errc::invalid_argument, "--out " + out + ": " + parent.string() +
                                                            " is not a directory this user can write to");
  return {};
}

// The prediction job's file: strategy "predict" over the store, the model directory as its model.
std::string job_file(const options& o, const std::string& store) {
  const auto root = fs::absolute(o.root).lexically_normal().string();
  std::string t = "[job]\nname = \"predict\"\nstrategy = \"predict\"\nroot = " + quoted(root) +
                  "\nworkers = " + std::to_string(o.workers) + "\nmin_workers = 1\nmax_workers = " +
                  std::to_string(std::max<std::uint32_t>(o.workers, 8)) +
                  "\nrecords_per_task = " + std::to_string(o.records_per_task) + "\n";
  t += "[model]\ntype = \"exported\"\npath = " + quoted(fs::absolute(o.model).lexically_normal().string()) +
       "\n";
  t += "[train]\nepochs = 1\nshuffle = false\nbatch_size = " + std::to_string(o.batch) +
       "\nthreads = " + std::to_string(o.threads) + "\n";
  t += "[data]\nsource = \"store\"\ntrain = " + quoted(store) + "\ntest = " + quoted(store) + "\n";
  return t;
}

// Runs the prediction job (in `job_id`'s directory under the root); the runner's exit code in `rc`.
expected<std::string> run_prediction(const options& o, const std::string& store, const std::string& job_id,
                                     int& rc) {
  char path[] = "/tmp/troupe-predict-XXXXXX.toml";
  int fd = ::mkstemps(path, 5);
  if (fd < 0) return make_unexpected(core_errc::io_error, "cannot make a temporary job file in /tmp");
  ::close(fd);
  std::ofstream(path) << job_file(o, store);
  control::run_options ro;
  ro.file = path;
  ro.file_name = o.model;  // the job file is this command's own: its problems are the model's
  ro.job_id = job_id;
  ro.progress = !o.quiet;
  ro.result_line = false;  // predict and evaluate print one line of their own
  rc = control::run_job(ro);
  ::unlink(path);
  return fs::absolute(o.root).lexically_normal().string() + "/" + ro.job_id;
}

std::string csv_header(const model::model_info& m, std::uint32_t width, bool lines) {
  std::string h = lines ? "line" : "record";
  if (width == 1) return h + ",probability" + (m.class_names.size() == 2 ? ",class" : "");
  h += ",class";
  for (std::uint32_t c = 0; c < width; ++c)
    h += ",p_" + (c < m.class_names.size() ? m.class_names[c] : std::to_string(c));
  return h;
}

std::string class_name(const model::model_info& m, std::size_t c) {
  return c < m.class_names.size() ? m.class_names[c] : std::to_string(c);
}

// The parts into `out` (a temporary file renamed into place): one line per row, in record order,
// numbered by `numbers` (a CSV input's line numbers, or a store's record numbers from 0).
expected<std::uint64_t> write_csv(const std::string& job_dir, const model::model_info& m,
                                  const std::string& out, const row_numbers& numbers) {
  const std::string tmp = out + ".tmp-" + std::to_string(::getpid());
  std::ofstream f(tmp);
  bool header = false;
  auto n =
      model::visit_parts(job_dir + "/predictions", [&](const model::prediction_part& p) -> expected<void> {
        if (!header) f << csv_header(m, p.width, numbers.lines) << "\n";
        header = true;
        char num[32];
        for (std::uint64_t r = 0; r < p.rows; ++r) {
          const float* v = p.values.data() + r * p.width;
          f << numbers.of(p.first + r);
          if (p.width == 1) {
            std::snprintf(num, sizeof num, "%.7g", v[0]);
            f << ',' << num;
            if (m.class_names.size() == 2) f << ',' << class_name(m, v[0] >= 0.5f ? 1 : 0);
          } else {
            f << ',' << class_name(m, static_cast<std::size_t>(std::max_element(v, v + p.width) - v));
            for (std::uint32_t c = 0; c < p.width; ++c) {
              std::snprintf(num, sizeof num, "%.7g", v[c]);
              f << ',' << num;
            }
          }
          f << '\n';
        }
        return {};
      });
  f.close();
  if (!n || !f) {
    fs::remove(tmp);
    return n ? make_unexpected(core_errc::io_error, out + ": cannot be written") : n;
  }
  if (std::error_code ec; fs::rename(tmp, out, ec), ec)
    return make_unexpected(core_errc::io_error, out + ": " + ec.message());
  return *n;
}

// The command's JSON line once the prediction job finished: the scores, or the written CSV.
int report(const options& o, const model::model_info& m, const std::string& dir, const input& data,
           bool evaluate, clock::time_point started) {
  nlohmann::json j{{"job", dir}};
  if (evaluate) {
    auto s = model::score_parts(dir + "/predictions");
    if (!s) return run_error(s.err());
    j["rows"] = s->rows;
    j["loss"] = s->loss;
    j["accuracy"] = s->accuracy;
    if (std::isfinite(s->auc)) j["auc"] = s->auc;  // none with one class only
  } else {
    auto n = write_csv(dir, m, o.out, data.numbers);
    if (!n) return run_error(n.err());
    j["out"] = o.out;
    j["rows"] = *n;
  }
  if (data.skipped > 0) {
    j["skipped_rows"] = data.skipped;
    std::fprintf(
        stderr,
        "troupe: note: %llu row(s) with a missing value skipped (the model was trained with --missing "
        "skip-row: its rows had none), the first at %s of %s\n",
        static_cast<unsigned long long>(data.skipped), data.first_skipped.c_str(), o.data.c_str());
  }
  const double secs = std::chrono::duration<double>(clock::system().now() - started).count();
  j["seconds"] = secs;
  j["rows_per_s"] = secs > 0 ? j["rows"].get<double>() / secs : 0.0;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int predict_or_evaluate(const options& o, bool evaluate) {
  auto m = model::read_model_dir(o.model);
  if (!m) return usage_error(m.err());
  auto& clk = clock::system();
  const auto started = clk.now();
  // As `troupe run` names jobs (its ids were predict-<unix ms>, an evaluation's too: two started in
  // the same millisecond collided, and the second was told its --job-id, never given, existed).
  const std::string job_id =
      o.job_id.empty() ? control::default_job_id(evaluate ? "evaluate" : "predict") : o.job_id;
  const std::string job_dir = fs::absolute(o.root).lexically_normal().string() + "/" + job_id;
  if (std::error_code ec; fs::exists(job_dir, ec))
    return usage_error("--job-id " + job_id + ": " + job_dir + " exists");
  if (!evaluate)
    if (auto w = writable(o.out); !w) return usage_error(w.err());
  auto data = input_store(o, *m, job_dir, evaluate);
  if (!data) {
    std::error_code ec;
    fs::remove_all(job_dir, ec);  // a CSV that did not encode leaves nothing behind
    // As the import: a file that cannot be read (a truncated gzip) is exit 1, refused input exit 2.
    if (data.err().code() == std::error_code(core_errc::io_error)) return run_error(data.err());
    return usage_error(data.err());
  }
  int rc = 0;
  auto dir = run_prediction(o, data->store, job_id, rc);
  if (!dir) return run_error(dir.err());
  if (rc != 0) {
    std::ifstream result(*dir + "/result.json");  // the failed job's end, as `troupe run` prints it
    std::string line;
    if (std::getline(result, line)) std::printf("%s\n", line.c_str());
    return rc;
  }
  return report(o, *m, *dir, *data, evaluate, started);
}

void common_flags(CLI::App& sub, options& o) {
  sub.add_option("model", o.model, "a model directory (jobs/<id>/model, or a copy)")->required();
  sub.add_option("--data", o.data,
                 "the rows: a CSV file (read as the model's data was imported) or a record store")
      ->required();
  sub.add_option("--workers", o.workers, "workers (default 2)")->check(CLI::Range(1, 1024));
  sub.add_option("--records-per-task", o.records_per_task, "rows a task (default 4096)")
      ->check(CLI::Range(1, 1 << 30));
  sub.add_option("--batch", o.batch, "rows a forward (default 1024)")->check(CLI::Range(1, 1 << 20));
  sub.add_option("--threads", o.threads, "libtorch threads a worker (default 1)")->check(CLI::Range(1, 256));
  sub.add_option("--delimiter", o.delimiter, "a CSV's field separator (default: the import's; tab too)");
  sub.add_option("--root", o.root, "jobs root of the prediction job (default jobs)");
  sub.add_option("--job-id", o.job_id,
                 "the prediction job's id (default predict-<time>-<random>; evaluate-... for evaluate)");
  sub.add_flag("--quiet", o.quiet, "no progress line");
}

const command_registrar predict_reg{
    "predict", "Run a trained model on rows as an elastic job; one CSV line per row, in input order",
    [](CLI::App& sub) -> runner {
      auto o = std::make_shared<options>();
      common_flags(sub, *o);
      sub.add_option("--out", o->out, "the CSV file to write")->required();
      return [o]() -> int { return predict_or_evaluate(*o, false); };
    }};

const command_registrar evaluate_reg{
    "evaluate", "Score a trained model on labelled rows (loss, accuracy, AUC) as an elastic job",
    [](CLI::App& sub) -> runner {
      auto o = std::make_shared<options>();
      common_flags(sub, *o);
      return [o]() -> int { return predict_or_evaluate(*o, true); };
    }};

}  // namespace
}  // namespace troupe::cli
