#include "troupe/nn/config.hpp"

#include <algorithm>

#include "troupe/core/log.hpp"
#include "troupe/nn/errc.hpp"

namespace troupe::nn {
namespace {

std::vector<std::size_t> sizes(config_section& s, std::string_view key, const std::vector<std::size_t>& def) {
  std::vector<config_section::i64> d(def.begin(), def.end());
  std::vector<std::size_t> out;
  for (auto v : s.get_ints(key, d)) {
    if (v <= 0 || v > (1 << 24)) {
      s.fail(key, core_errc::out_of_range, "every entry must be in [1, 16777216], got " + std::to_string(v));
      return def;
    }
    out.push_back(static_cast<std::size_t>(v));
  }
  return out;
}

std::size_t count(config_section& s, std::string_view key, std::size_t def, std::int64_t min = 0,
                  std::int64_t max = std::int64_t{1} << 40) {
  return static_cast<std::size_t>(s.get_int(key, static_cast<std::int64_t>(def), min, max));
}

}  // namespace

model_config read_model_config(config_section s, model_config c) {
  c.type = s.get_string("type", c.type);
  auto known = model_registry::instance().names();
  known.push_back("torchscript");
  known.push_back("exported");  // a model directory's model.pt, for prediction jobs
  if (c.type == "torchscript" || c.type == "exported") c.path = s.require_string("path");
  c.init = s.get_string("init", c.init);
  if (std::find(known.begin(), known.end(), c.type) == known.end()) {
    std::string list;
    for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
    s.fail("type", core_errc::out_of_range,
           "model type '" + c.type + "' is not registered (known: " + list + ")");
  }
  c.hidden = sizes(s, "hidden", c.hidden);
  c.embedding_dim = count(s, "embedding_dim", c.embedding_dim, 1, 4096);
  c.embedding_scale = s.get_double("embedding_scale", c.embedding_scale, 0, 10);
  c.dropout = s.get_double("dropout", c.dropout, 0, 0.99);
  c.filters = sizes(s, "filters", c.filters);
  c.cnn_dropout = s.get_double("cnn_dropout", c.cnn_dropout, 0, 0.99);
  c.layers = s.get_strings("layers", c.layers);
  c.seed = static_cast<std::uint64_t>(s.get_int("seed", static_cast<std::int64_t>(c.seed), 0));
  return c;
}

train_config read_train_config(config_section s, train_config c) {
  c.epochs = count(s, "epochs", c.epochs, 1, 100000);
  c.batch_size = count(s, "batch_size", c.batch_size, 1, 1 << 20);
  auto& o = c.optimizer;
  o.type = s.get_enum("optimizer", o.type, {"sgd", "adagrad", "adam"});
  o.learning_rate = s.get_double("learning_rate", o.learning_rate, 1e-12, 1e6);
  o.momentum = s.get_double("momentum", o.momentum, 0, 0.999999);
  o.nesterov = s.get_bool("nesterov", o.nesterov);
  o.initial_accumulator = s.get_double("initial_accumulator", o.initial_accumulator, 0, 1e6);
  o.beta1 = s.get_double("beta1", o.beta1, 0, 0.999999);
  o.beta2 = s.get_double("beta2", o.beta2, 0, 0.999999999);
  o.epsilon = s.get_double("epsilon", o.epsilon, 1e-30, 1);
  o.weight_decay = s.get_double("weight_decay", o.weight_decay, 0, 1);
  c.seed = static_cast<std::uint64_t>(s.get_int("seed", static_cast<std::int64_t>(c.seed), 0));
  c.log_every = count(s, "log_every", c.log_every, 0, 1 << 30);
  c.shuffle = s.get_bool("shuffle", c.shuffle);
  c.eval_batch_size = count(s, "eval_batch_size", c.eval_batch_size, 1, 1 << 20);
  c.threads = static_cast<int>(s.get_int("threads", c.threads, 0, 1024));
  c.device = s.get_enum("device", c.device, {"cpu", "gpu"});
  c.max_samples_per_s = s.get_double("max_samples_per_s", c.max_samples_per_s, 0, 1e12);
  c.noise_scale = s.get_bool("noise_scale", c.noise_scale);
  c.noise_scale_every = count(s, "noise_scale_every", c.noise_scale_every, 1, 1 << 20);
  c.lr_scaling = s.get_enum("lr_scaling", c.lr_scaling, {"none", "linear", "sqrt", "adascale"});
  c.batch = s.get_enum("batch", c.batch, {"fixed", "auto", "global"});
  c.max_batch = count(s, "max_batch", c.max_batch, 0, 1 << 24);
  // Unset: 1024, or batch_size when larger (each worker starts at it; job_spec refuses a bound set below it).
  c.max_local_batch =
      count(s, "max_local_batch", std::max<std::size_t>(c.max_local_batch, c.batch_size), 1, 1 << 20);
  if (!c.noise_scale && (c.lr_scaling == "adascale" || c.batch == "auto"))
    s.fail("noise_scale", core_errc::invalid_argument,
           "lr_scaling = \"adascale\" and batch = \"auto\" need the noise scale (noise_scale = true)");
  if (c.batch == "auto" && c.lr_scaling != "adascale")
    s.fail("batch", core_errc::invalid_argument,
           "batch = \"auto\" needs lr_scaling = \"adascale\" (the goodput model assumes AdaScale's learning "
           "rate)");
  return c;
}

namespace {

// The keys of one source set in a job of another: refused naming the source that reads them (a
// `[data]` of `train` and `test` stores without `source = "store"` was "unknown key").
void note_keys_of_other_sources(config_section& s, const std::string& source) {
  static constexpr std::pair<const char*, const char*> keys[] = {{"dir", "\"fashion-mnist\""},
                                                                 {"train", "\"store\" or \"criteo\""},
                                                                 {"test", "\"store\" or \"criteo\""},
                                                                 {"test_fraction", "\"criteo\""},
                                                                 {"buckets_per_field", "\"criteo\""}};
  static constexpr const char* synthetic[] = {"rows",          "test_rows", "fields",     "vocab_per_field",
                                              "zipf_exponent", "dense_dim", "factor_dim", "weight_scale",
                                              "factor_scale",  "bias",      "model_seed", "sample_seed"};
  const std::string is =
      ", and this job's source is \"" + source + "\"" + (s.has("source") ? "" : " (the default)");
  for (const auto& [key, sources] : keys) s.read_with(key, std::string("read with source = ") + sources + is);
  for (const auto* key : synthetic) s.read_with(key, "read with source = \"synthetic-ctr\"" + is);
}

void read_synthetic(config_section& s, data_config& c) {
  auto& o = c.synthetic;
  o.rows = count(s, "rows", o.rows, 1, std::int64_t{1} << 32);
  c.test_rows = count(s, "test_rows", c.test_rows, 1, std::int64_t{1} << 32);
  o.fields = count(s, "fields", o.fields, 1, 1024);
  o.vocab_per_field = count(s, "vocab_per_field", o.vocab_per_field, 1, 1 << 24);
  o.zipf_exponent = s.get_double("zipf_exponent", o.zipf_exponent, 0, 10);
  o.dense_dim = count(s, "dense_dim", o.dense_dim, 0, 4096);
  o.factor_dim = count(s, "factor_dim", o.factor_dim, 0, 256);
  o.weight_scale = s.get_double("weight_scale", o.weight_scale, 0, 100);
  o.factor_scale = s.get_double("factor_scale", o.factor_scale, 0, 100);
  o.bias = s.get_double("bias", o.bias, -100, 100);
  o.model_seed =
      static_cast<std::uint64_t>(s.get_int("model_seed", static_cast<std::int64_t>(o.model_seed), 0));
  o.sample_seed =
      static_cast<std::uint64_t>(s.get_int("sample_seed", static_cast<std::int64_t>(o.sample_seed), 0));
}

}  // namespace

data_config read_data_config(config_section s, data_config c) {
  c.source = s.get_enum("source", c.source, {"fashion-mnist", "criteo", "synthetic-ctr", "store"});
  // Read by fashion-mnist and criteo only; noted elsewhere (job_check), a stored job.toml still loads.
  c.max_train_rows = count(s, "max_train_rows", c.max_train_rows);
  c.max_test_rows = count(s, "max_test_rows", c.max_test_rows);
  c.serve = s.get_enum("serve", c.serve, {"auto", "always", "never"});
  c.cache_mb = count(s, "cache_mb", c.cache_mb, 0, std::int64_t{1} << 20);
  c.spill_mb = count(s, "spill_mb", c.spill_mb, 0, std::int64_t{1} << 24);
  c.spill_dir = s.get_string("spill_dir", c.spill_dir);
  if (c.source == "fashion-mnist") {
    c.dir = s.get_string("dir", c.dir);
  } else if (c.source == "store") {
    c.train_path = s.require_string("train");
    c.test_path = s.require_string("test");
  } else if (c.source == "criteo") {
    c.train_path = s.require_string("train");
    c.test_path = s.get_string("test", c.test_path);
    c.test_fraction = s.get_double("test_fraction", c.test_fraction, 0, 0.99);
    c.criteo.buckets_per_field = static_cast<std::uint64_t>(
        s.get_int("buckets_per_field", static_cast<std::int64_t>(c.criteo.buckets_per_field), 2,
                  std::int64_t{1} << 40));
  } else {
    read_synthetic(s, c);
  }
  note_keys_of_other_sources(s, c.source);
  return c;
}

job_config read_job_config(config_reader& r) {
  job_config j;
  j.train = read_train_config(r.section("train"));
  model_config m;
  m.seed = j.train.seed;
  j.model = read_model_config(r.section("model"), m);
  j.data = read_data_config(r.section("data"));
  return j;
}

expected<job_config> load_job_config(const config_doc& doc) {
  config_reader r(doc);
  (void)log_config::read(r.section("log"), log_config{});
  auto j = read_job_config(r);
  if (auto ok = r.finish(); !ok) return ok.err();
  return j;
}

namespace {

expected<train_test> load_fashion_mnist(const data_config& c) {
  auto tr = read_fashion_mnist(c.dir, "train", c.max_train_rows);
  if (!tr) return tr.err();
  auto te = read_fashion_mnist(c.dir, "t10k", c.max_test_rows);
  if (!te) return te.err();
  train_test out;
  out.train = std::move(*tr);
  out.test = std::move(*te);
  return out;
}

// The test file's rows, or without one the last test_fraction of the training file's.
expected<train_test> load_criteo(const data_config& c) {
  criteo_options o = c.criteo;
  o.max_rows = c.max_train_rows;
  auto tr = read_criteo_tsv(c.train_path, o);
  if (!tr) return tr.err();
  train_test out;
  if (!c.test_path.empty()) {
    o.max_rows = c.max_test_rows;
    auto te = read_criteo_tsv(c.test_path, o);
    if (!te) return te.err();
    out.train = std::move(*tr);
    out.test = std::move(*te);
  } else {
    const auto test_rows = static_cast<std::size_t>(static_cast<double>(tr->rows) * c.test_fraction);
    out.test = tr->slice(tr->rows - test_rows, test_rows);
    out.train = tr->slice(0, tr->rows - test_rows);
  }
  return out;
}

// The test rows drawn with the next sample seed; the generator's true AUC and log loss on them.
expected<train_test> load_synthetic_ctr(const data_config& c) {
  synthetic_ctr_options o = c.synthetic;
  auto tr = generate_synthetic_ctr(o);
  if (!tr) return tr.err();
  o.rows = c.test_rows;
  o.sample_seed = c.synthetic.sample_seed + 1;
  auto te = generate_synthetic_ctr(o);
  if (!te) return te.err();
  train_test out;
  out.train = std::move(tr->data);
  out.test = std::move(te->data);
  out.true_auc = te->true_auc;
  out.true_logloss = te->true_logloss;
  return out;
}

expected<train_test> load_source(const data_config& c) {
  if (c.source == "fashion-mnist") return load_fashion_mnist(c);
  if (c.source == "criteo") return load_criteo(c);
  if (c.source == "synthetic-ctr") return load_synthetic_ctr(c);
  if (c.source == "store")
    return make_unexpected(nn_errc::bad_config,
                           "data source 'store' (record stores made by `troupe data import`) is read by the "
                           "job runtime, not by nn::load_data");
  return make_unexpected(nn_errc::bad_config,
                         "data source '" + c.source + "': expected fashion-mnist, criteo or synthetic-ctr");
}

}  // namespace

expected<train_test> load_data(const data_config& c) {
  auto out = load_source(c);
  if (!out) return out;
  if (out->train.rows == 0)
    return make_unexpected(nn_errc::bad_data, out->train.info.name + ": no training rows");
  return out;
}

}  // namespace troupe::nn
