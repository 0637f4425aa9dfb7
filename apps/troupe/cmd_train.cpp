// `troupe train --local JOB.toml [--set k=v]...`: trains the job's [model] on its [data] in this
// process. Progress and per-epoch evaluation go to stderr; the final metrics are one JSON line
// on stdout.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "job_config_check.hpp"
#include "train_model_out.hpp"
#include "troupe/actors/backends.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/gpu/trainer.hpp"
#include "troupe/job/data.hpp"
#include "troupe/job/job_spec.hpp"
#include "troupe/model/plugin.hpp"
#include "troupe/nn/config.hpp"
#include "troupe/nn/epoch.hpp"
#include "troupe/nn/metrics.hpp"
#include "troupe/nn/trainer.hpp"

namespace troupe::cli {
namespace {

struct options {
  std::string file;
  std::vector<std::string> overrides;
  bool local = false;
};

nlohmann::json eval_json(const nn::eval_result& r, bool binary) {
  nlohmann::json j{{"rows", r.rows}, {"loss", r.loss}, {"accuracy", r.accuracy}};
  if (binary && std::isfinite(r.auc)) j["auc"] = r.auc;  // none: the test rows hold one class only
  return j;
}

void print_eval(std::size_t epoch, const nn::eval_result& r, bool binary, double secs) {
  if (binary && std::isfinite(r.auc))
    std::fprintf(stderr, "epoch %zu: test loss %.4f auc %.4f accuracy %.4f (%.1f s)\n", epoch, r.loss, r.auc,
                 r.accuracy, secs);
  else
    std::fprintf(stderr, "epoch %zu: test loss %.4f accuracy %.4f (%.1f s)\n", epoch, r.loss, r.accuracy,
                 secs);
}

// Real seconds since `start` (troupe::clock::system()): what the run took, for its report.
double seconds_since(clock::time_point start) {
  return std::chrono::duration<double>(clock::system().now() - start).count();
}

void print_progress(const nn::progress& p) {
  std::fprintf(stderr, "epoch %zu step %zu/%zu loss %.4f %.0f samples/s\n", p.epoch, p.step,
               p.steps_per_epoch, p.loss, p.samples_per_s);
}

// One epoch on the host trainer, or ([train] device = "gpu") on the device replica, whose
// parameters are then copied into the host model for evaluation.
expected<double> train_one_epoch(const nn::job_config& job, const nn::train_test& data, nn::trainer& t,
                                 gpu::device_trainer* dev, std::size_t epoch) {
  if (!dev) return t.train_epoch(data.train, print_progress);
  auto loss = gpu::train_epoch(*dev, data.train, job.train, epoch, print_progress);
  if (!loss) return loss;
  if (auto ok = dev->download(t.get_model()); !ok) return ok.err();
  return loss;
}

// Trains job.train.epochs epochs (`one_epoch(e)`, 0-based), evaluating after each (`evaluate`);
// fills `history` and `last`, returns the last epoch's training loss.
expected<double> train_epochs(const nn::job_config& job, bool binary,
                              const std::function<expected<double>(std::size_t)>& one_epoch,
                              const std::function<expected<nn::eval_result>()>& evaluate,
                              nlohmann::json& history, nn::eval_result& last) {
  const auto start = clock::system().now();
  double train_loss = 0;
  for (std::size_t e = 1; e <= job.train.epochs; ++e) {
    auto loss = one_epoch(e - 1);
    if (!loss) return loss.err();
    // As a `troupe run` worker fails its task (and the job) on such a step: a model that predicts
    // nothing, written and reported "ok" with a null loss (exit 0), was the end before.
    if (!std::isfinite(*loss))
      return make_unexpected(
          core_errc::invalid_argument,
          "training diverged: the loss of epoch " + std::to_string(e) + " is " +
              (std::isnan(*loss) ? "NaN" : "infinite") +
              " (the model's weights are no longer numbers: a lower train.learning_rate, or "
              "a model that computes no NaN)");
    train_loss = *loss;
    auto ev = evaluate();
    if (!ev) return ev.err();
    last = *ev;
    print_eval(e, last, binary, seconds_since(start));
    auto ej = eval_json(last, binary);
    ej["epoch"] = e;
    ej["train_loss"] = train_loss;
    ej["seconds"] = seconds_since(start);
    history.push_back(ej);
  }
  return train_loss;
}

// [data] source = "store": record stores (made by `troupe data import`) read whole; else nn's readers.
expected<nn::train_test> load_train_test(const nn::data_config& c) {
  if (c.source != "store") return nn::load_data(c);
  nn::train_test out;
  for (auto [dir, into] : {std::pair{&c.train_path, &out.train}, std::pair{&c.test_path, &out.test}}) {
    auto s = storage::record_store::open(*dir);
    if (!s) return s.err();
    auto d = job::read_all(*s);
    if (!d) return d.err();
    *into = std::move(*d);
  }
  return out;
}

// The test set through a trainer backend's predict, in eval batches.
expected<nn::eval_result> evaluate(actors::trainer_backend& b, const nn::dataset& data, std::size_t batch) {
  std::vector<float> scores;
  double loss_sum = 0;
  for (std::size_t first = 0; first < data.rows; first += batch) {
    const std::size_t n = std::min(batch, data.rows - first);
    auto loss = b.predict(nn::batch(data, first, n));
    if (!loss) return loss.err();
    loss_sum += static_cast<double>(*loss) * static_cast<double>(n);
    auto p = b.probabilities();
    scores.insert(scores.end(), p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n * b.output_width()));
  }
  return nn::score_predictions(scores, b.output_width(),
                               std::span<const float>(data.labels.data(), data.rows), loss_sum);
}

// The final JSON line of `troupe train --local`, in the shape `troupe run` prints (docs/job.md,
// "The final JSON"); `backend` names the trainer backend when one trained it ("native": nn's trainer,
// for the built-in models; the key was absent for them while job.md listed it).
struct local_result {
  std::string backend;
  std::string device;     // "cpu" or "gpu": the switch the trainer followed
  std::string placement;  // the backend's (trainer_backend::placement); empty: nn's trainer
  std::uint64_t steps = 0;
  double train_loss = 0, secs = 0;
  bool binary = false;
};
nlohmann::json result_json(const nn::job_config& job, const nn::train_test& data, const local_result& r,
                           const nn::eval_result& last, const nlohmann::json& history) {
  const std::size_t samples = data.train.rows * job.train.epochs;
  nlohmann::json out{{"strategy", "local"},
                     {"model", job.model.type},
                     {"data", job.data.source},
                     {"ok", true},
                     {"epochs", job.train.epochs},
                     {"device", r.device},
                     {"steps", r.steps},
                     {"train_loss", r.train_loss},
                     {"test_rows", last.rows},
                     {"test_loss", last.loss},
                     {"test_accuracy", last.accuracy},
                     {"samples_trained", samples},
                     {"wall_seconds", r.secs},
                     {"samples_per_s", r.secs > 0 ? static_cast<double>(samples) / r.secs : 0},
                     {"history", history}};
  out["backend"] = r.backend.empty() ? "native" : r.backend;
  if (!r.placement.empty()) out["placement"] = r.placement;
  if (r.binary && std::isfinite(last.auc)) out["test_auc"] = last.auc;
  if (data.true_auc > 0) out["true_auc"] = data.true_auc;
  return out;
}

// The model it trained (train_model_out.hpp), named in the final line; a model that cannot be
// written is the command's failure (exit 1) after the line (with model_error) is printed, and
// stderr says why in one line (the training itself went well: its figures are in the line).
int finish(const config_doc& doc, const job::job_spec& spec, expected<storage::flat_state> state,
           nlohmann::json out, std::uint64_t steps) {
  expected<std::string> dir =
      state ? write_local_model(doc, spec, *state, out, steps) : expected<std::string>(state.err());
  if (dir)
    out["model_dir"] = *dir;
  else {
    out["model_error"] = dir.err().to_string();
    out["ok"] = false;  // the command fails (exit 1): the line must not say otherwise
  }
  std::printf("%s\n", out.dump().c_str());
  if (!dir)
    std::fprintf(stderr, "troupe: error: the trained model was not written: %s\n",
                 dir.err().describe().c_str());
  return dir ? 0 : 1;
}

// [model] type = "torchscript": the job's epochs through the TorchScript backend (the same
// batches, in the same order, as the native trainer's train_epoch).
int run_local_backend(const config_doc& doc, const job::job_spec& spec, const nn::train_test& data) {
  const auto& job = spec.nn;
  auto b = actors::make_host_backend(spec, data.train.info);
  if (!b) return usage_error(b.err());
  auto& be = **b;
  std::fprintf(stderr,
               "model %s (%s backend, on %s): %zu dense parameters, %zu embedding tables; train %zu rows, "
               "test %zu rows\n",
               job.model.type.c_str(), std::string(be.name()).c_str(), be.placement().c_str(),
               be.parameters().size(), be.embedding_tables().size(), data.train.rows, data.test.rows);
  const bool binary = be.output_width() == 1;
  const auto start = clock::system().now();
  nlohmann::json history = nlohmann::json::array();
  nn::eval_result last;
  std::vector<std::uint32_t> order;
  std::uint64_t steps = 0;
  auto one_epoch = [&](std::size_t epoch) {
    return nn::run_epoch(
        data.train, job.train, epoch, order,
        [&](const nn::batch& batch) -> expected<double> {
          auto l = be.step(batch);
          if (!l) return l.err();
          ++steps;
          return static_cast<double>(*l);
        },
        print_progress);
  };
  auto train_loss = train_epochs(
      job, binary, one_epoch, [&] { return evaluate(be, data.test, job.train.eval_batch_size); }, history,
      last);
  if (!train_loss) return run_error(train_loss.err());
  auto out = result_json(job, data,
                         {std::string(be.name()), spec.job.device, be.placement(), steps, *train_loss,
                          seconds_since(start), binary},
                         last, history);
  return finish(doc, spec, actors::snapshot_state(be), std::move(out), steps);
}

// The device replica of `m` when [train] device = "gpu"; null on the host.
expected<std::unique_ptr<gpu::device_trainer>> device_replica(const nn::job_config& job, nn::model& m) {
  if (job.train.device != "gpu") return std::unique_ptr<gpu::device_trainer>();
  return gpu::device_trainer::create(0, m, job.train);
}

// The line a run starts with: the model's size and the data's.
void describe(const std::string& type, nn::model& m, const nn::train_test& data) {
  std::fprintf(
      stderr, "model %s: %zu dense parameters, %zu embedding tables; train %zu rows, test %zu rows\n",
      type.c_str(), m.parameter_count(), m.embedding_tables().size(), data.train.rows, data.test.rows);
}

// One process at batch_size: the ring's batch rules do nothing here (they were ignored silently).
void note_ring_rules(const nn::train_config& t) {
  if (t.batch != "fixed" || t.lr_scaling != "none")
    std::fprintf(stderr,
                 "troupe: note: train --local trains one process at train.batch_size with the job file's "
                 "learning rate: train.batch = \"%s\" and train.lr_scaling = \"%s\" apply to `troupe run` "
                 "(an allreduce ring) only\n",
                 t.batch.c_str(), t.lr_scaling.c_str());
}

int run_local(const options& o) {
  auto doc = load_job_doc(o.file, o.overrides);
  if (!doc) return usage_error(doc.err());
  // A whole job file is accepted ([job], [ps] are validated and ignored here).
  auto spec = job::job_spec::read(*doc);
  if (!spec) return usage_error(spec.err());
  auto* job = &spec->nn;
  note_ring_rules(job->train);
  auto data = load_train_test(job->data);
  if (!data) return run_error(data.err());
  if (auto fits = actors::check_fits_memory(*spec, data->train.info); !fits) return usage_error(fits.err());
  if (job->model.type == "torchscript") {
    if (job->train.device != "cpu") spec->job.device = job->train.device;  // the backend's device switch
    return run_local_backend(*doc, *spec, *data);
  }
  auto m = nn::model_registry::instance().create(job->model, data->train.info);
  if (!m) return usage_error(m.err());
  auto t = nn::trainer::create(**m, job->train);
  if (!t) return usage_error(t.err());
  auto dev = device_replica(*job, **m);
  if (!dev) return run_error(dev.err());
  model::preload_torchscript();  // the model is written through it at the end: it loads meanwhile
  describe(job->model.type, **m, *data);
  const auto start = clock::system().now();
  nlohmann::json history = nlohmann::json::array();
  nn::eval_result last;
  auto train_loss = train_epochs(
      *job, (*m)->num_classes() == 2,
      [&](std::size_t epoch) { return train_one_epoch(*job, *data, **t, dev->get(), epoch); },
      [&] { return (*t)->evaluate(data->test); }, history, last);
  if (!train_loss) return run_error(train_loss.err());
  const std::uint64_t steps =
      *dev ? job->train.epochs * ((data->train.rows + job->train.batch_size - 1) / job->train.batch_size)
           : (*t)->steps();
  auto out = result_json(
      *job, *data,
      {"", job->train.device, "", steps, *train_loss, seconds_since(start), (*m)->num_classes() == 2}, last,
      history);
  return finish(*doc, *spec, state_of(**m), std::move(out), steps);
}

const command_registrar reg{
    "train", "Train a job's model (--local: in this process) and print final metrics as JSON",
    [](CLI::App& sub) -> runner {
      auto o = std::make_shared<options>();
      sub.add_option("file", o->file, "job file (TOML) with [model], [train], [data]")->required();
      sub.add_flag("--local", o->local, "train in this process (the only mode for now)");
      sub.add_option("--set", o->overrides, "override a key: --set train.epochs=2 (repeatable)");
      return [o]() -> int {
        if (!o->local)
          return usage_error("troupe train: only --local is implemented; use `troupe train --local FILE`");
        return run_local(*o);
      };
    }};

}  // namespace
}  // namespace troupe::cli
