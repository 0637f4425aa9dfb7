#include "troupe/job/job_check.hpp"

#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/own_path.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "troupe/cluster/addresses.hpp"
#include "troupe/cluster/config.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/job/data.hpp"
#include "troupe/nn/data/readers.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::job {

namespace {

namespace fs = std::filesystem;

// Why job directories cannot be made under `root` ("" when they can): it, or the nearest of its
// parents that exists, is not a directory or not writable (a read-only filesystem). Said as the
// root's problem: a root that was a file read as the dataset cache's, one on a read-only
// filesystem as "cannot create <root>/<job id>/logs", a path never made.
std::string root_problem(const std::string& root) {
  std::error_code ec;
  fs::path p = fs::absolute(root.empty() ? "." : root, ec);
  for (; !ec && !p.empty(); p = p.parent_path()) {
    const auto st = fs::status(p, ec);
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
      return p.string() + ": " + ec.message();
    if (!ec && fs::exists(st)) {
      if (!fs::is_directory(st)) return p.string() + ": not a directory";
      if (::access(p.c_str(), W_OK | X_OK) != 0)
        return p.string() + ": cannot create in it: " + std::strerror(errno);
      return "";
    }
    ec.clear();
    if (p == p.parent_path()) break;
  }
  return "";
}

// [model] and [train] optimizer keys set (from their defaults) that the model type or optimizer
// does not read: `type = "lr"` with `hidden = [64, 64]` trained a linear model, `beta1` with sgd
// nothing, without a word. Types registered by others are not judged.
void model_keys_not_read(const nn::job_config& c, std::vector<std::string>& out) {
  const nn::model_config m0;
  const auto& m = c.model;
  const bool builtin = m.type == "lr" || m.type == "mlp" || m.type == "cnn" || m.type == "wide_deep" ||
                       m.type == "deepfm" || m.type == "sequential" || m.type == "torchscript";
  auto note = [&](bool set, const char* key, const std::string& readers, bool read) {
    if (builtin && set && !read)
      out.push_back("model." + std::string(key) + ": read by model types " + readers + "; model.type \"" +
                    m.type + "\" does not: the key has no effect");
  };
  const bool mlp_like = m.type == "mlp" || m.type == "wide_deep" || m.type == "deepfm";
  note(m.hidden != m0.hidden, "hidden", "mlp, wide_deep and deepfm", mlp_like);
  note(m.dropout != m0.dropout, "dropout", "mlp, wide_deep and deepfm", mlp_like);
  // A TorchScript module's embedding table (sparse data) is troupe's: it reads both.
  const std::string embedders = "mlp (sparse data), wide_deep, deepfm and torchscript";
  const bool embeds = mlp_like || m.type == "torchscript";
  note(m.embedding_dim != m0.embedding_dim, "embedding_dim", embedders, embeds);
  note(m.embedding_scale != m0.embedding_scale, "embedding_scale", embedders, embeds);
  note(m.filters != m0.filters, "filters", "cnn", m.type == "cnn");
  note(m.cnn_dropout != m0.cnn_dropout, "cnn_dropout", "cnn", m.type == "cnn");
  note(m.layers != m0.layers, "layers", "sequential", m.type == "sequential");
  const nn::optimizer_config o0;
  const auto& o = c.train.optimizer;
  auto opt = [&](bool set, const char* key, const std::string& readers, bool read) {
    if (set && !read)
      out.push_back("train." + std::string(key) + ": read by optimizers " + readers + "; train.optimizer \"" +
                    o.type + "\" does not: the key has no effect");
  };
  opt(o.momentum != o0.momentum, "momentum", "sgd", o.type == "sgd");
  opt(o.nesterov != o0.nesterov, "nesterov", "sgd (with momentum)", o.type == "sgd");
  opt(o.initial_accumulator != o0.initial_accumulator, "initial_accumulator", "adagrad", o.type == "adagrad");
  opt(o.beta1 != o0.beta1, "beta1", "adam", o.type == "adam");
  opt(o.beta2 != o0.beta2, "beta2", "adam", o.type == "adam");
  opt(o.epsilon != o0.epsilon, "epsilon", "adagrad and adam", o.type != "sgd");
}

// [data] row limits its source does not read: a store's job trained every row ("max_train_rows =
// 100": 6,750 samples), without a word.
void data_keys_not_read(const nn::data_config& d, std::vector<std::string>& out) {
  if (d.source == "fashion-mnist" || d.source == "criteo") return;
  const std::string why = d.source == "store" ? "a store's rows are all read (import fewer rows)"
                                              : "synthetic-ctr makes `rows` and `test_rows`";
  for (const auto& [key, value] :
       {std::pair{"max_train_rows", d.max_train_rows}, {"max_test_rows", d.max_test_rows}})
    if (value != 0)
      out.push_back("data." + std::string(key) + ": read for sources fashion-mnist and criteo; " + why +
                    ": the key has no effect");
}

// Keys the job file sets (from their defaults) that its strategy or batch rule does not read (they
// were accepted silently), one note each. A key at its default says nothing: `troupe config check --print`
// writes every key, and its output is a job file.
std::vector<std::string> keys_not_read(const job_spec& spec) {
  std::vector<std::string> out;
  const auto& strategy = spec.job.strategy;
  if (spec.job.sync_every != job_options{}.sync_every && !spec.traits().syncs_every)
    out.push_back(
        "job.sync_every: read by strategies that average replicas every that many steps "
        "(local_sgd); job.strategy \"" +
        strategy + "\" does not: the key has no effect");
  if (!(spec.ps == ps_options{}) && !spec.uses_ps())
    out.push_back("[ps]: the parameter-server shards' settings; job.strategy \"" + strategy +
                  "\" launches no PS shards: the section has no effect");
  const auto& t = spec.nn.train;
  const nn::train_config defaults;
  if (t.batch != "auto") {
    const std::string why =
        ": bounds batch = \"auto\"; this job's train.batch is \"" + t.batch + "\": the key has no effect";
    if (t.max_batch != defaults.max_batch) out.push_back("train.max_batch" + why);
    // batch = "global" splits a replica's share into micro-batches of at most max_local_batch.
    if (t.batch != "global" && t.max_local_batch != std::max(defaults.max_local_batch, t.batch_size))
      out.push_back(
          "train.max_local_batch: bounds batch = \"auto\" and \"global\"; this job's train.batch "
          "is \"" +
          t.batch + "\": the key has no effect");
  }
  return out;
}

error data_error(const std::string& key, const std::string& problem) {
  return error(core_errc::invalid_argument,
               std::string("key 'data.").append(key).append("': ").append(problem));
}

expected<void> need(const std::string& key, const std::string& path, bool directory) {
  std::error_code ec;
  if (path.empty()) return data_error(key, "is empty");
  if (!fs::exists(path, ec)) return data_error(key, path + ": no such " + (directory ? "directory" : "file"));
  if (directory && !fs::is_directory(path, ec)) return data_error(key, path + ": is a file, not a directory");
  if (!directory && fs::is_directory(path, ec)) return data_error(key, path + ": is a directory, not a file");
  return {};
}

std::string describe(const storage::record_schema& s) {
  std::string out = "rows of " + std::to_string(s.dense_dim) + " dense values, " +
                    std::to_string(s.sparse_fields) + " sparse fields (" +
                    std::to_string(s.buckets_per_field) + " ids each), " + std::to_string(s.num_classes) +
                    " classes";
  if (!s.image_shape.empty()) {
    out += ", images";
    for (auto d : s.image_shape) out.append(" ").append(std::to_string(d));
  }
  return out;
}

// The model is built for the training rows and evaluated on the test rows: rows of one shape, test
// labels among the training classes (and of the same names, when the labels were text).
expected<void> same_data(const nn::data_config& c, const storage::manifest& train,
                         const storage::manifest& test) {
  auto shape = [](storage::record_schema s) {
    s.num_classes = 0;
    return s;
  };
  const bool named = train.columns && test.columns && !train.columns->class_names.empty() &&
                     !test.columns->class_names.empty();
  if (shape(train.schema) == shape(test.schema) && test.schema.num_classes <= train.schema.num_classes &&
      (!named || train.columns->class_names == test.columns->class_names)) {
    // Rows of one shape encoded otherwise (other column order, another standardization: each import
    // standardizes with its own rows' statistics) read as other values: the job's test metrics were
    // silently wrong (accuracy 0.52 for 0.925).
    if (!train.columns || !test.columns) return {};
    auto d = storage::encoding_difference(*train.columns, *test.columns,
                                          "data.train's rows (" + c.train_path + ")",
                                          "data.test's (" + c.test_path + ")", {false, true});
    if (d.empty()) return {};
    return data_error("test", c.test_path + ": its rows are encoded otherwise than the training rows: " + d +
                                  " (import the test rows with `troupe data import csv --like " +
                                  c.train_path + "`, or split one import with --test-fraction)");
  }
  return data_error("test", c.test_path + ": " + describe(test.schema) + (named ? " (named)" : "") +
                                ", but data.train's (" + c.train_path + ") are " + describe(train.schema) +
                                ": give the train and test stores of one import");
}

expected<void> check_data_paths(const nn::data_config& c) {
  if (c.source == "fashion-mnist") return need("dir", c.dir, true);
  if (c.source == "criteo") {
    if (auto r = need("train", c.train_path, false); !r) return r;
    if (!c.test_path.empty()) return need("test", c.test_path, false);
  }
  if (c.source != "store") return {};
  std::vector<storage::manifest> m;
  for (const auto& [key, dir] : {std::pair{"train", c.train_path}, std::pair{"test", c.test_path}}) {
    if (auto r = need(key, dir, true); !r) return r;
    auto s = storage::record_store::open_read_only(dir);
    if (!s) return data_error(key, s.err().to_string() + " (make one with `troupe data import`)");
    m.push_back(s->info());
  }
  return same_data(c, m[0], m[1]);
}

}  // namespace

expected<nominal_data> nominal_data_of(const nn::data_config& c) {
  nominal_data d;
  auto& info = d.info;
  info.name = c.source;
  if (c.source == "fashion-mnist") {
    info.dense_dim = 28 * 28;
    info.num_classes = 10;
    info.image_shape = {1, 28, 28};
    // Unreadable: the runner's import says why.
    if (auto n = nn::fashion_mnist_rows(c.dir, "train", c.max_train_rows)) d.train_records = *n;
  } else if (c.source == "criteo") {
    info.dense_dim = 13;
    info.sparse_fields = 26;
    info.buckets_per_field = c.criteo.buckets_per_field;
  } else if (c.source == "synthetic-ctr") {
    info.dense_dim = c.synthetic.dense_dim;
    info.sparse_fields = c.synthetic.fields;
    info.buckets_per_field = c.synthetic.vocab_per_field;
    d.train_records = c.synthetic.rows;
  } else {
    auto s = storage::record_store::open_read_only(c.train_path);
    if (!s) return s.err();
    info = info_of(s->info(), c.train_path);
    d.train_records = s->count();
  }
  return d;
}

expected<void> check_model_fits_strategy(const job_spec& spec, bool has_embedding_tables) {
  if (spec.uses_ps() || !has_embedding_tables) return {};
  return make_unexpected(core_errc::invalid_argument,
                         std::string("key 'job.strategy': '")
                             .append(spec.job.strategy)
                             .append("' replicates dense parameters only; model '")
                             .append(spec.nn.model.type)
                             .append("' has embedding tables: use [job] strategy = \"async_ps\""));
}

expected<void> check_job(const job_spec& spec, const std::vector<std::string>& strategies,
                         const model_probe& model) {
  if (std::find(strategies.begin(), strategies.end(), spec.job.strategy) == strategies.end()) {
    std::string names;
    for (const auto& n : strategies) names += (names.empty() ? "" : ", ") + n;
    return make_unexpected(core_errc::invalid_argument,
                           "strategy '" + spec.job.strategy + "': registered are " + names);
  }
  if (auto d = check_data_paths(spec.nn.data); !d) return d;
  // The local launcher's hosts reach the master at [cluster] advertise: loopback, or an address of
  // another machine, was found only as nodes never joined (or as the job's start failed); without
  // it, the address towards the first host (none: refused by the runner after it made the job's
  // directory, and `config check` said ok). The runner's own plan, which asks no cluster manager.
  if (spec.cluster.launcher == "local" && !spec.cluster.hosts.empty())
    if (auto a = cluster::plan_control(spec.cluster); !a) return a.err();
  // A partition Slurm has not: refused before a job directory is made (it was refused as the runner
  // started, leaving a failed directory). Slurm down or its commands missing are the runner's to
  // say: `config check` checks the file, not the cluster's day.
  if (auto p = cluster::check_slurm_partitions(spec.cluster, std::chrono::seconds(5));
      !p && p.err() == cluster::cluster_errc::invalid_spec)
    return p.err();
  if (auto why = root_problem(spec.job.root); !why.empty())
    return make_unexpected(core_errc::invalid_argument, "job.root " + spec.job.root +
                                                            " (--root, or [job] root): " + why +
                                                            ": no job directory can be made there");
  // A built-in dataset goes through the cache: one whose directory is another user's would refuse
  // its entry at the job's start (exit 1, a failed job directory left); said now.
  if (spec.nn.data.source != "store")
    if (auto why = cluster::shared_parent_problem(spec.job.dataset_cache); !why.empty())
      return make_unexpected(
          core_errc::invalid_argument,
          "job.dataset_cache " + spec.job.dataset_cache + ": " + why +
              ": no place for this user's cache (set [job] dataset_cache to a directory of yours)");
  auto data = nominal_data_of(spec.nn.data);
  if (!data) return data.err();
  auto tables = model(spec, data->info);
  if (!tables) return tables.err();
  return check_model_fits_strategy(spec, *tables);
}

storage::journal_options journal_options_of(const job_spec& spec, const std::string& train_dir,
                                            std::uint64_t records) {
  storage::journal_options o;
  o.dataset = train_dir;
  o.record_count = records;
  o.records_per_task = spec.job.records_per_task;
  o.epochs = static_cast<std::uint32_t>(spec.nn.train.epochs);
  o.shuffle_seed = spec.nn.train.seed;
  o.shuffle = spec.nn.train.shuffle;
  o.max_failures = spec.job.max_task_failures;
  return o;
}

std::string journal_mismatch(const storage::journal_options& made, const storage::journal_options& now) {
  const auto d = storage::journal_difference(made, now);
  if (!d) return "";
  // The job file's key for each field the journal holds, and the unit of its values.
  struct named {
    std::string key, unit;
  };
  static const std::map<std::string, named> names = {
      {"dataset", {"the training data ([data])", ""}},
      {"record_count", {"the training data's size ([data])", " records"}},
      {"records_per_task", {"job.records_per_task", ""}},
      {"epochs", {"train.epochs", ""}},
      {"shuffle", {"train.shuffle", ""}},
      {"shuffle_seed", {"train.seed", ""}}};
  const auto it = names.find(d->field);
  const named n = it == names.end() ? named{d->field, ""} : it->second;
  return n.key + " is " + d->now + n.unit + ", the journal was made for " + d->made;
}

std::string name_problem(const std::string& name) {
  // The id made from it: "<name>-YYYYmmdd-HHMMSS-xxxx" (21 characters after the name), at most 64.
  if (name.size() > 43 || !cluster::valid_job_id(name))
    return "the job's default id starts with it, so it must be 1-43 characters of a-z, A-Z, 0-9, '_', "
           "'-', '.', not starting with '.'";
  return "";
}

// The noise scale's keys where nothing estimates it, and a lone worker that never can: it estimates
// from two consecutive full batches of one task (docs/goodput.md), none with fewer than 2 x batch_size
// records a task (a job shrunk to one worker kept its ring's old estimate, or had none, to its end).
void goodput_notes(const job_spec& spec, std::vector<std::string>& notes) {
  const auto& t = spec.nn.train;
  const nn::train_config defaults;
  const bool estimated = (spec.traits().global_batch || spec.uses_ps()) && t.noise_scale;
  const std::string where =
      "job.strategy \"" + spec.job.strategy + "\"" + (t.noise_scale ? "" : " with noise_scale = false");
  if (!t.noise_scale && !(spec.traits().global_batch || spec.uses_ps()))
    notes.push_back("train.noise_scale: allreduce and async_ps jobs estimate the noise scale; " + where +
                    " does not: the key has no effect");
  else if (t.noise_scale_every != defaults.noise_scale_every && !estimated)
    notes.push_back("train.noise_scale_every: how often the noise scale is estimated; " + where +
                    " estimates none: the key has no effect");
  if (estimated && spec.traits().global_batch && t.lr_scaling == "adascale" && spec.job.min_workers <= 1 &&
      spec.job.records_per_task < 2 * t.batch_size)
    notes.push_back("job.records_per_task (" + std::to_string(spec.job.records_per_task) +
                    ") is below 2 x train.batch_size (" + std::to_string(2 * t.batch_size) +
                    "): one worker alone estimates the noise scale from two consecutive full batches of "
                    "a task, so while one trains the estimate stands still (lr_scaling's gain, batch = "
                    "\"auto\"'s choices and the status keep the last one)");
}

std::vector<std::string> job_notes(const job_spec& spec) {
  std::vector<std::string> notes;
  if (spec.nn.train.device == "gpu" && !spec.uses_gpu())
    notes.push_back(
        "[train] device = \"gpu\" is troupe train --local's switch; this job's workers train on the CPU "
        "([job] device = \"cpu\"): set [job] device = \"gpu\" (--set job.device=gpu) to train them on GPUs");
  for (auto& n : keys_not_read(spec)) notes.push_back(std::move(n));
  goodput_notes(spec, notes);
  model_keys_not_read(spec.nn, notes);
  data_keys_not_read(spec.nn.data, notes);
  return notes;
}

}  // namespace troupe::job
