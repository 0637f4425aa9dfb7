#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "exported_backend.hpp"
#include "native_backend.hpp"
#include "troupe/actors/backends.hpp"
#include "troupe/actors/torchscript.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/job/data.hpp"
#include "troupe/model/model_dir.hpp"
#include "troupe/model/state.hpp"
#include "troupe/nn/errc.hpp"
#include "troupe/storage/record_store.hpp"
#include "worker/replica_state.hpp"

namespace troupe::actors {

namespace {

torchscript_options torchscript_options_of(const job::job_spec& spec, const nn::dataset_info& info) {
  const auto& mc = spec.nn.model;
  torchscript_options o;
  o.path = mc.path;
  o.data = info;
  o.optimizer = spec.nn.train.optimizer;
  o.embedding_dim = mc.embedding_dim;
  o.embedding_scale = mc.embedding_scale;
  o.seed = mc.seed;
  o.threads = spec.nn.train.threads;
  o.device = spec.uses_gpu() ? "gpu" : "cpu";
  return o;
}

// Everything a TorchScript replica is built from: a preloaded one serves only the same options.
std::string key_of(const torchscript_options& o) {
  const auto& d = o.data;
  const auto& p = o.optimizer;
  return fmt::format("{}|{}|{}/{}/{}/{}x{}x{}/{}|{}/{}/{}/{}/{}/{}/{}/{}/{}|{}/{}/{}/{}/{}", o.path, d.name,
                     d.dense_dim, d.sparse_fields, d.num_classes, d.image_shape[0], d.image_shape[1],
                     d.image_shape[2], d.buckets_per_field, p.type, p.learning_rate, p.momentum, p.nesterov,
                     p.initial_accumulator, p.beta1, p.beta2, p.epsilon, p.weight_decay, o.embedding_dim,
                     o.embedding_scale, o.seed, o.threads, o.device);
}

// The replica a standby preloaded (preload_host_backend), until a worker of this process takes it.
struct preloaded_replica {
  std::mutex mu;
  std::string key;
  std::unique_ptr<trainer_backend> backend;
};
preloaded_replica& preloaded() {
  static preloaded_replica p;
  return p;
}

}  // namespace

expected<std::unique_ptr<trainer_backend>> make_host_backend(const job::job_spec& spec,
                                                             const nn::dataset_info& info) {
  const auto& mc = spec.nn.model;
  if (mc.type == "exported")
    return make_exported_backend(mc.path, info, spec.nn.train.threads,
                                 std::max(spec.nn.train.batch_size, spec.nn.train.eval_batch_size));
  if (mc.type == "torchscript") {
    auto o = torchscript_options_of(spec, info);
    auto& p = preloaded();
    std::lock_guard lock(p.mu);
    if (p.backend && p.key == key_of(o)) return std::move(p.backend);
    return load_torchscript(o);
  }
  auto m = nn::model_registry::instance().create(mc, info);
  if (!m) return m.err();
  auto b = native_backend::create(std::move(*m), spec.nn.train);
  if (!b) return b.err();
  return std::unique_ptr<trainer_backend>(std::move(*b));
}

std::string preload_host_backend(const job::job_spec& spec, const std::string& train_dir) {
  if (spec.nn.model.type != "torchscript") return "";
  // The real time the preload took, for the standby's log (no node, and so no node clock, yet).
  troupe::clock& clk = troupe::clock::system();
  auto t0 = clk.now();
  auto ms = [&] { return std::chrono::duration_cast<std::chrono::milliseconds>(clk.now() - t0).count(); };
  if (auto ok = open_torchscript_plugin(); !ok) {
    spdlog::warn("standby: {}", ok.err().to_string());
    return "";
  }
  // A GPU replica's device may depend on the worker's slot, which only its identity tells.
  if (spec.uses_gpu()) return fmt::format("the TorchScript plugin loaded in {} ms", ms());
  auto store = storage::record_store::open(train_dir);
  if (!store) return fmt::format("the TorchScript plugin loaded in {} ms", ms());
  auto o = torchscript_options_of(spec, job::info_of(store->info(), store->dir()));
  auto b = load_torchscript(o);
  if (!b) {
    spdlog::warn("standby: {}", b.err().to_string());
    return fmt::format("the TorchScript plugin loaded in {} ms", ms());
  }
  auto& p = preloaded();
  std::lock_guard lock(p.mu);
  p.key = key_of(o);
  p.backend = std::move(*b);
  return fmt::format("the TorchScript plugin and {} loaded in {} ms", o.path, ms());
}

// A model whose dense layers cannot fit in this machine's memory (hidden = [16777216, 16777216]:
// each width allowed alone): refused naming the key, before anything is built (building it in
// `config check` threw std::bad_alloc, "config: std::bad_alloc", or took every byte there was).
// Each parameter costs ~16 bytes: itself, its gradient, Adam's two moments.
expected<void> check_fits_memory(const job::job_spec& spec, const nn::dataset_info& info) {
  const auto& m = spec.nn.model;
  if (m.hidden.empty() || (m.type != "mlp" && m.type != "wide_deep" && m.type != "deepfm")) return {};
  double width = static_cast<double>(info.dense_dim + info.sparse_fields * m.embedding_dim), params = 0;
  for (auto h : m.hidden) {
    params += width * static_cast<double>(h);
    width = static_cast<double>(h);
  }
  params += width * static_cast<double>(std::max<std::size_t>(info.num_classes, 1));
  const double memory =
      static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (memory <= 0 || params * 16 <= memory) return {};
  char text[160];
  std::snprintf(text, sizeof text,
                "%.3g parameters in its dense layers, ~%.0f GiB with their gradients and Adam's moments; "
                "this machine has %.0f GiB",
                params, params * 16 / (1u << 30), memory / (1u << 30));
  return make_unexpected(core_errc::out_of_range,
                         "key 'model.hidden': the model would hold " + std::string(text));
}

namespace {
// One training step on a row of zeros: whether the module trains on one row (batch norm does not:
// "Expected more than 1 value per channel when training").
expected<void> trains_on_one_row(trainer_backend& b, const nn::dataset_info& info) {
  const auto d = nn::dataset::zeros(info, 1);
  if (auto l = b.compute_gradients(nn::batch(d, 0, 1)); !l) return l.err();
  return {};
}

bool one_row_left(std::uint64_t rows, std::uint64_t batch) {
  return batch > 1 && rows % batch == 1;
}

// batch = "auto" and "global": the ring chooses each worker's batch, and the worker folds a row
// left alone at a task's end into the batch before it (worker_batches.cpp, the micro-batches too).
bool batches_chosen_by_the_ring(const job::job_spec& spec) {
  return spec.nn.train.batch != "fixed";
}

std::string records_text(std::uint64_t n) {
  return std::to_string(n) + (n == 1 ? " record" : " records");
}

// Where every task's batches can meet one row, the refusal for a module that cannot train on one,
// as "<what>, " and "<what to set>" around "and the module cannot train on one row (<why>): ".
struct one_row_refusal {
  std::string what, instead;
};
std::optional<one_row_refusal> one_row_batches(const job::job_spec& spec) {
  const auto batch = spec.nn.train.batch_size, per_task = spec.job.records_per_task;
  if (batch == 1)
    return one_row_refusal{"key 'train.batch_size': 1 trains every batch on one row, ", "at least 2"};
  // The ring's batches: a worker's share is 2 rows at the least (allreduce.cpp), and a lone row at a
  // task's end is folded into the batch before it.
  if (batches_chosen_by_the_ring(spec) || !one_row_left(per_task, batch)) return std::nullopt;
  return one_row_refusal{"key 'job.records_per_task': " + records_text(per_task) + " a task in batches of " +
                             std::to_string(batch) + " (train.batch_size) end" + (per_task == 1 ? "s" : "") +
                             " each task in a batch of 1 row, ",
                         "one that leaves no single row, e.g. " +
                             std::to_string(per_task > 1 ? per_task - 1 : batch) +
                             " (a multiple of train.batch_size)"};
}

// A module that cannot train on one row where some batch of the job can be one row (tasks of k x
// batch_size + 1 records under fixed batches, a batch size of 1):
// it failed each task there, and the job with them, after everything else had trained.
expected<void> check_one_row_batches(trainer_backend& b, const job::job_spec& spec,
                                     const nn::dataset_info& info) {
  auto r = one_row_batches(spec);
  if (!r || !b.embedding_tables().empty()) return {};
  auto l = trains_on_one_row(b, info);
  if (l) return {};
  return make_unexpected(core_errc::invalid_argument, r->what + "and the module cannot train on one row (" +
                                                          l.err().to_string() + "): " + r->instead);
}

// Whether the epoch's last task (`records` % `per_task` of them) ends in a batch of one row: under the
// ring's batches only a task of one record (a lone row at any other task's end is folded).
bool last_task_leaves_one_row(const job::job_spec& spec, std::uint64_t per_task, std::uint64_t records) {
  const auto last = records % per_task;
  return batches_chosen_by_the_ring(spec) ? last == 1 : one_row_left(last, spec.nn.train.batch_size);
}

// The records_per_task nearest `per_task` whose tasks, the last one too, end in no batch of one row,
// no smaller than the job's checks allow (under "global" its global batch, under allreduce batch_size);
// none where no task size leaves none (batch_size 2 and an odd number of records, fixed batches).
std::optional<std::uint64_t> per_task_without_one_row(const job::job_spec& spec, std::uint64_t per_task,
                                                      std::uint64_t records) {
  const auto batch = spec.nn.train.batch_size;
  const bool ring = batches_chosen_by_the_ring(spec);
  const std::uint64_t least = spec.nn.train.batch == "global" ? spec.job.workers * batch
                              : spec.traits().global_batch    ? batch
                                                              : 1;
  auto fits = [&](std::uint64_t p) {
    return p >= least && (ring || !one_row_left(p, batch)) && !last_task_leaves_one_row(spec, p, records);
  };
  // Past `records` every size is one task of them all.
  for (std::uint64_t d = 1; d < per_task || per_task + d <= records + 1; ++d) {
    if (d < per_task && fits(per_task - d)) return per_task - d;
    if (per_task + d <= records + 1 && fits(per_task + d)) return per_task + d;
  }
  return std::nullopt;
}
}  // namespace

expected<void> check_last_task(const job::job_spec& spec, const nn::dataset_info& info,
                               std::uint64_t records) {
  const auto batch = spec.nn.train.batch_size, per_task = spec.job.records_per_task;
  if (spec.nn.model.type != "torchscript" || !spec.traits().trains || per_task == 0 ||
      one_row_batches(spec) || !last_task_leaves_one_row(spec, per_task, records))
    return {};
  auto t = load_torchscript(torchscript_options_of(spec, info));
  if (!t) return t.err();
  if (!(*t)->embedding_tables().empty()) return {};
  auto l = trains_on_one_row(**t, info);
  if (l) return {};
  const auto last = records % per_task;
  const auto other = per_task_without_one_row(spec, per_task, records);
  const std::string instead =
      other ? "one that leaves no single row, e.g. " + std::to_string(*other)
            : "no records_per_task leaves none with " + records_text(records) + " in batches of " +
                  std::to_string(batch) +
                  ": another train.batch_size, or one record fewer (data.max_train_rows)";
  const std::string ends =
      batches_chosen_by_the_ring(spec)
          ? "which is a batch of 1 row whatever the ring's batch (train.batch = \"" + spec.nn.train.batch +
                "\")"
          : "which ends in a batch of 1 row (train.batch_size " + std::to_string(batch) + ")";
  return make_unexpected(
      core_errc::invalid_argument,
      "key 'job.records_per_task': the training data's " + records_text(records) + " in tasks of " +
          std::to_string(per_task) + " leave a last task of " + records_text(last) + " each epoch, " + ends +
          ", and the module cannot train on one row (" + l.err().to_string() + "): " + instead);
}

expected<bool> check_model(const job::job_spec& spec, const nn::dataset_info& info) {
  if (auto fits = check_fits_memory(spec, info); !fits) return fits.err();
  if (spec.nn.model.type == "torchscript") {
    auto o = torchscript_options_of(spec, info);
    // A batch of the evaluation's size too: a module that fails only there fails now, not at the end.
    o.probe_rows = std::max<std::size_t>(o.probe_rows, spec.nn.train.eval_batch_size);
    auto t = load_torchscript(o);
    if (!t) return t.err();
    if (auto one = check_one_row_batches(**t, spec, info); !one) return one.err();
    return !(*t)->embedding_tables().empty();
  }
  auto b = make_host_backend(spec, info);
  if (!b) return b.err();
  return !(*b)->embedding_tables().empty();
}

expected<void> check_init_state(const job::job_spec& spec, const nn::dataset_info& info,
                                const storage::shard_state& state, bool complete) {
  auto b = make_host_backend(spec, info);
  if (!b) return b.err();
  auto r = restore(**b, state, false, complete);
  if (!r) return r.err();
  if (!complete && r->tensors == 0 && !state.dense.empty())
    return make_unexpected(nn::nn_errc::bad_shape, "none of the state's " +
                                                       std::to_string(state.dense.size()) +
                                                       " tensors is one of the model's (another model?)");
  for (auto* t : (*b)->embedding_tables()) {
    auto rows = state.embeddings.find(t->name());
    if (rows == state.embeddings.end() || rows->second.empty()) continue;
    const auto width = rows->second.begin()->second.size();
    if (width != t->dim())
      return make_unexpected(nn::nn_errc::bad_shape, "embedding table '" + t->name() + "' has rows of " +
                                                         std::to_string(width) + " values in the state, " +
                                                         std::to_string(t->dim()) + " in the model");
  }
  return {};
}

expected<storage::flat_state> snapshot_state(trainer_backend& b) {
  auto s = snapshot(b);
  if (!s) return s.err();
  for (auto* t : b.embedding_tables()) {
    storage::flat_rows rows{t->name(), t->dim(), {}, {}};
    t->for_each([&](std::uint64_t id, const float* row) {
      rows.ids.push_back(id);
      rows.values.insert(rows.values.end(), row, row + t->dim());
    });
    s->embeddings.push_back(std::move(rows));
  }
  return s;
}

expected<model::loaded_state> load_init_state(const job::job_spec& spec, const nn::dataset_info& info) {
  const auto& from = spec.nn.model.init;
  auto st = model::init_state(from);
  if (!st) return std::move(st).err().wrap("model.init");  // its errors name the path
  if (auto c = check_init_state(spec, info, st->state); !c)
    return std::move(c).err().wrap("model.init " + from + ": the state does not fit this job's model");
  // Another class behind an id, other columns: the weights would read the rows otherwise (a
  // difference of scaling is the runner's warning).
  if (spec.nn.data.source == "store")
    if (auto e = model::check_init_encoding(from, spec.nn.data.train_path); !e) return e.err();
  return st;
}

expected<bool> check_model_and_init(const job::job_spec& spec, const nn::dataset_info& info) {
  auto tables = check_model(spec, info);
  if (!tables || spec.nn.model.init.empty()) return tables;
  if (auto st = load_init_state(spec, info); !st) return st.err();
  return tables;
}

}  // namespace troupe::actors
