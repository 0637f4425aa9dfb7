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
#include "predict_input.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/control/runner.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/job/csv_import.hpp"
#include "troupe/model/model_dir.hpp"
#include "troupe/model/predictions.hpp"
#include "troupe/nn/metrics.hpp"

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
  bool quiet = false, skip_malformed = false;
};

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump();  // a JSON string is a TOML basic string
}

// Whether `p` (absolute) lies under /proc or /dev but /dev/shm: a terminal, a pipe, a device, or the
// very file a shell's stdout was opened on (/dev/stdout -> /proc/self/fd/1: renamed over, the shell's
// later output went nowhere).
bool device_path(const fs::path& p) {
  auto it = p.begin();
  if (it == p.end() || ++it == p.end()) return false;
  if (*it == "proc") return true;
  return *it == "dev" && (++it == p.end() || *it != "shm");
}

// The file `out` names once each link is followed, each hop (and the directory it ends in) checked
// against device_path; why not, when a hop is one or the chain does not end (a loop): a link's
// target was checked alone, and a link to /dev/stdout, or a loop, got through.
expected<fs::path> follow_out(const std::string& out) {
  auto refuse = [&](const std::string& why) { return make_unexpected(core_errc::invalid_argument, why); };
  std::error_code ec;
  fs::path p = fs::absolute(out, ec).lexically_normal();
  for (int hops = 0; hops < 40; ++hops) {
    if (device_path(p))
      return refuse("a device or /proc path (standard output is not written to): give a file name");
    if (!fs::is_symlink(fs::symlink_status(p, ec))) {
      if (device_path(fs::weakly_canonical(p.parent_path(), ec)))
        return refuse("in a device or /proc directory: give a file name");
      return p;
    }
    const auto next = fs::read_symlink(p, ec);
    if (ec) return refuse("a link that cannot be read: " + ec.message());
    p = (next.is_absolute() ? next : p.parent_path() / next).lexically_normal();
  }
  return refuse("links that lead nowhere (a loop?): give a file name");
}

// --out before anything runs: a file name (not "-": the summary line goes to stdout), in a directory
// that exists and can be written, neither --data's file nor anything but a regular file (the CSV is
// written beside it and renamed over it: a FIFO, a device or /dev/stdout was replaced by a file).
// A link to a regular file is followed: the file it names is written. The path to write, or why not.
expected<std::string> writable(const std::string& out, const std::string& data, const std::string& model) {
  auto refuse = [&](const std::string& why) {
    return make_unexpected(core_errc::invalid_argument, "--out " + (out.empty() ? "''" : out) + ": " + why);
  };
  if (out.empty()) return refuse("empty (give a file name)");
  if (out == "-") return refuse("standard output is not written to (give a file name)");
  std::error_code ec;
  if (fs::is_directory(out, ec)) return refuse("a directory (give a file name)");
  auto followed = follow_out(out);
  if (!followed) return refuse(followed.err().context());
  const fs::path target = *followed;
  const auto st = fs::status(target, ec);
  if (fs::exists(st) && !fs::is_regular_file(st))
    return refuse("not a regular file (a FIFO, a device, a socket): it would be replaced; give a file name");
  if (fs::exists(st) && fs::equivalent(target, data, ec))
    return refuse("the file --data reads (it would be overwritten): give another name");
  auto parent = target.parent_path();
  // The model's own directory: --out model.json replaced the model with its predictions, and any file
  // there makes it a directory an export may not replace.
  if (fs::exists(parent, ec) && fs::equivalent(parent, model, ec))
    return refuse("in the model directory " + model +
                  " (its model.json or model.pt would be overwritten): give a "
                  "file elsewhere");
  if (!fs::exists(parent, ec)) return refuse(parent.string() + ": no such directory");
  if (!fs::is_directory(parent, ec) || ::access(parent.c_str(), W_OK) != 0)
    return refuse(parent.string() + " is not a directory this user can write to");
  return target.string();
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
  ro.quiet_log = o.quiet;
  ro.result_line = false;  // predict and evaluate print one line of their own
  rc = control::run_job(ro);
  ::unlink(path);
  return fs::absolute(o.root).lexically_normal().string() + "/" + ro.job_id;
}

// A field as RFC 4180 writes it (the import reads it so): quoted, its quotes doubled, where it
// holds a delimiter, a quote or a line break. A class named "New York, NY" made a line of 7 fields
// under a header of 6.
using job::csv_field;

std::string class_name(const model::model_info& m, std::size_t c) {
  return csv_field(c < m.class_names.size() ? m.class_names[c] : std::to_string(c));
}

std::string csv_header(const model::model_info& m, std::uint32_t width, bool lines) {
  std::string h = lines ? "line" : "record";
  if (width == 1) return h + ",probability" + (m.class_names.size() == 2 ? ",class" : "");
  h += ",class";
  for (std::uint32_t c = 0; c < width; ++c)
    h += "," + csv_field("p_" + (c < m.class_names.size() ? m.class_names[c] : std::to_string(c)));
  return h;
}

// One row's values after its number: a class and its probabilities; false (the class empty, the
// values "nan") where the model gave a value that is no number (a row far outside what it was
// trained on): it was written as class 0 with "-nan".
bool write_row(std::ofstream& f, const model::model_info& m, const float* v, std::uint32_t width) {
  const bool finite = nn::scored(v, width);
  char num[32];
  auto value = [&](float x) {
    if (!finite) return f << ",nan", void();
    std::snprintf(num, sizeof num, "%.7g", x);
    f << ',' << num;
  };
  if (width == 1) {
    value(v[0]);
    if (m.class_names.size() == 2) f << ',' << (finite ? class_name(m, v[0] >= 0.5f ? 1 : 0) : "");
  } else {
    f << ',' << (finite ? class_name(m, static_cast<std::size_t>(std::max_element(v, v + width) - v)) : "");
    for (std::uint32_t c = 0; c < width; ++c) value(v[c]);
  }
  f << '\n';
  return finite;
}

// The parts into `out` (a temporary file renamed into place): one line per row, in record order,
// numbered by `numbers` (a CSV input's line numbers, or a store's record numbers from 0). The rows
// without a finite output are counted in `unscored` (the first one's number in `first_unscored`).
expected<std::uint64_t> write_csv(const std::string& job_dir, const model::model_info& m,
                                  const std::string& out, const row_numbers& numbers, std::uint64_t& unscored,
                                  std::uint64_t& first_unscored) {
  const std::string tmp = out + ".tmp-" + std::to_string(::getpid());
  std::ofstream f(tmp);
  bool header = false;
  auto n =
      model::visit_parts(job_dir + "/predictions", [&](const model::prediction_part& p) -> expected<void> {
        if (!header) f << csv_header(m, p.width, numbers.lines) << "\n";
        header = true;
        for (std::uint64_t r = 0; r < p.rows; ++r) {
          const auto number = numbers.of(p.first + r);
          f << number;
          if (!write_row(f, m, p.values.data() + r * p.width, p.width) && unscored++ == 0)
            first_unscored = number;
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

void input_notes(const options& o, const input& data, nlohmann::json& j);

// The note on stderr of rows without a finite output (`first`: the first one's line or record).
void note_unscored(std::uint64_t n, const row_numbers& numbers, std::uint64_t first, bool evaluate) {
  std::fprintf(
      stderr,
      "troupe: note: %llu row(s) the model gave no finite output for (%s), the first at %s %llu: are "
      "their inputs far outside what it was trained on, or the model's weights not finite?\n",
      static_cast<unsigned long long>(n),
      evaluate ? "they count as wrong, and the loss is null" : "their class is empty, their values nan",
      numbers.lines ? "line" : "record", static_cast<unsigned long long>(first));
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
    // Named as predict names them: the loss read null with no word of why.
    if (s->unscored > 0) {
      j["unscored_rows"] = s->unscored;
      note_unscored(s->unscored, data.numbers, data.numbers.of(s->first_unscored), true);
    }
  } else {
    std::uint64_t unscored = 0, first = 0;
    auto n = write_csv(dir, m, o.out, data.numbers, unscored, first);
    if (!n) return run_error(n.err());
    j["out"] = o.out;
    j["rows"] = *n;
    if (unscored > 0) {
      j["unscored_rows"] = unscored;
      note_unscored(unscored, data.numbers, first, false);
    }
  }
  input_notes(o, data, j);
  const double secs = std::chrono::duration<double>(clock::system().now() - started).count();
  j["seconds"] = secs;
  j["rows_per_s"] = secs > 0 ? j["rows"].get<double>() / secs : 0.0;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

// The input's rows left out (a missing value under skip-row, --skip-malformed): in the JSON line,
// and a note on stderr naming the first.
void input_notes(const options& o, const input& data, nlohmann::json& j) {
  if (data.skipped > 0) {
    j["skipped_rows"] = data.skipped;
    std::fprintf(
        stderr,
        "troupe: note: %llu row(s) with a missing value skipped (the model was trained with --missing "
        "skip-row: its rows had none), the first at %s of %s\n",
        static_cast<unsigned long long>(data.skipped), data.first_skipped.c_str(), o.data.c_str());
  }
  if (data.malformed > 0) {
    j["skipped_malformed"] = data.malformed;
    std::string lines;
    for (const auto& e : data.malformed_examples) lines += (lines.empty() ? "" : "; ") + e;
    std::fprintf(stderr, "troupe: note: %llu malformed line(s) of %s skipped (--skip-malformed): %s%s\n",
                 static_cast<unsigned long long>(data.malformed), o.data.c_str(), lines.c_str(),
                 data.malformed > data.malformed_examples.size() ? "; ..." : "");
  }
}

// Once --out is written (or the scores computed): the job's parts and a CSV's encoded copy go (both
// the size of the input; each run left them under --root for good), and the copy of the model the
// job ran (model_in/, the model's size). The job directory keeps its logs, result.json and task
// journal. A failed job keeps everything, to look into.
void drop_copies(const std::string& job_dir, const input& data) {
  std::error_code ec;
  fs::remove_all(job_dir + "/predictions", ec);
  fs::remove_all(job_dir + "/model_in", ec);
  if (data.copy) fs::remove_all(data.store, ec);  // never a store the user gave
}

// The prediction job's id (`job_id`) and directory under the root, not there yet: the id checked
// before anything is written under <root>/<id> (a `../x` wrote outside the root).
expected<std::string> new_job_dir(const options& o, bool evaluate, std::string& job_id) {
  // As `troupe run` names jobs (its ids were predict-<unix ms>, an evaluation's too: two started in
  // the same millisecond collided, and the second was told its --job-id, never given, existed).
  job_id = o.job_id.empty() ? control::default_job_id(evaluate ? "evaluate" : "predict") : o.job_id;
  if (!cluster::valid_job_id(job_id))
    return make_unexpected(
        core_errc::invalid_argument,
        "--job-id '" + job_id + "': 1-64 characters of a-z, A-Z, 0-9, '_', '-', '.', not starting with '.'");
  const std::string job_dir = fs::absolute(o.root).lexically_normal().string() + "/" + job_id;
  if (std::error_code ec; fs::exists(job_dir, ec))
    return make_unexpected(core_errc::invalid_argument, "--job-id " + job_id + ": " + job_dir + " exists");
  return job_dir;
}

int predict_or_evaluate(const options& o, bool evaluate) {
  if (o.quiet) quiet_logs();  // stderr: warnings and errors only (logs/runner.log keeps the rest)
  auto m = model::read_model_dir(o.model);
  if (!m) return usage_error(m.err());
  auto& clk = clock::system();
  const auto started = clk.now();
  std::string job_id;
  const auto job_dir = new_job_dir(o, evaluate, job_id);
  if (!job_dir) return usage_error(job_dir.err());
  auto out = evaluate ? expected<std::string>(std::string()) : writable(o.out, o.data, o.model);
  if (!out) return usage_error(out.err());
  options written = o;  // --out as written: a link's target
  written.out = *out;
  auto data = input_store({o.data, o.delimiter, o.skip_malformed}, *m, *job_dir, evaluate);
  if (!data) {
    std::error_code ec;
    fs::remove_all(*job_dir, ec);  // a CSV that did not encode leaves nothing behind
    // As the import: a file that cannot be read (a truncated gzip) is exit 1, refused input exit 2.
    if (data.err().code() == std::error_code(core_errc::io_error)) return run_error(data.err());
    return usage_error(data.err());
  }
  int rc = 0;
  auto dir = run_prediction(o, data->store, job_id, rc);
  if (std::error_code ec; !dir || (rc != 0 && !fs::exists(*job_dir + "/job.toml", ec)))
    fs::remove_all(*job_dir, ec);  // refused before its job began (a damaged model.pt): the copy goes
  if (!dir) return run_error(dir.err());
  if (rc != 0) {
    std::ifstream result(*dir + "/result.json");  // the failed job's end, as `troupe run` prints it
    std::string line;
    if (std::getline(result, line)) std::printf("%s\n", line.c_str());
    return rc;
  }
  const int reported = report(written, *m, *dir, *data, evaluate, started);
  if (reported == 0) drop_copies(*dir, *data);
  return reported;
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
  sub.add_flag(
      "--skip-malformed", o.skip_malformed,
      "drop a CSV's malformed lines (a field count other than the header's, bad quoting; counted and "
      "named) instead of refusing the file");
  sub.add_option("--root", o.root, "jobs root of the prediction job (default jobs)");
  sub.add_option("--job-id", o.job_id,
                 "the prediction job's id (default predict-<time>-<random>; evaluate-... for evaluate)");
  sub.add_flag("--quiet", o.quiet,
               "no progress line, and no log line but warnings and errors on stderr (the job's logs keep "
               "them)");
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
