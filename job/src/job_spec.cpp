#include "troupe/job/job_spec.hpp"

#include <algorithm>
#include <filesystem>

#include "troupe/job/dataset_cache.hpp"

namespace troupe::job {

namespace {
// [job] name, printed in logs, statuses and notes: a NUL cut a line short, a line break began a
// false one.
std::string read_name(config_section& s) {
  auto name = s.get_string("name", job_options{}.name);
  if (std::any_of(name.begin(), name.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }))
    s.fail("name", core_errc::invalid_argument, "a control character in it (a NUL, a tab or a line break)");
  return name;
}

job_options read_job(config_section s) {
  job_options o;
  o.name = read_name(s);
  o.root = s.get_string("root", o.root);
  o.strategy = s.get_string("strategy", o.strategy);
  if (!traits_of(o.strategy)) {
    std::string names;
    for (const auto& n : training_strategies()) names += (names.empty() ? "" : ", ") + n;
    s.fail("strategy", core_errc::out_of_range, "'" + o.strategy + "' is not one of: " + names);
  }
  o.workers = static_cast<std::uint32_t>(s.get_int("workers", o.workers, 1, 16384));
  o.min_workers = static_cast<std::uint32_t>(s.get_int("min_workers", o.min_workers, 0, 16384));
  o.max_workers =
      static_cast<std::uint32_t>(s.get_int("max_workers", std::max(o.max_workers, o.workers), 1, 16384));
  o.records_per_task = static_cast<std::uint64_t>(s.get_int("records_per_task", 1024, 1, 1 << 30));
  o.max_task_failures = static_cast<std::uint32_t>(s.get_int("max_task_failures", 3, 1, 1000));
  o.max_quarantined_in_a_row =
      static_cast<std::uint32_t>(s.get_int("max_quarantined_in_a_row", 8, 0, 1'000'000));
  o.lease_timeout = job_options::ms(s.get_int("lease_timeout_ms", 30'000, 100, 3'600'000));
  o.progress_every = job_options::ms(s.get_int("progress_every_ms", 500, 50, 60'000));
  o.sync_every = static_cast<std::uint32_t>(s.get_int("sync_every", 8, 1, 1 << 20));
  o.ring_capacity = static_cast<std::size_t>(s.get_int("ring_capacity_kb", 4096, 64, 1 << 20)) * 1024;
  o.ring_lanes = static_cast<std::uint32_t>(s.get_int("ring_lanes", 0, 0, 16));
  o.rpc_timeout = job_options::ms(s.get_int("rpc_timeout_ms", 10'000, 100, 600'000));
  o.dataset_cache = s.get_string("dataset_cache", "");
  o.device = s.get_enum("device", o.device, {"cpu", "gpu"});
  o.disk_full_timeout = job_options::ms(s.get_int("disk_full_timeout_ms", 300'000, 1'000, 86'400'000));
  o.checkpoint_every = job_options::ms(s.get_int("checkpoint_every_ms", 10'000, 0, 86'400'000));
  if (o.min_workers > o.max_workers)
    s.fail(
        "min_workers", core_errc::out_of_range,
        std::to_string(o.min_workers) + " is more than max_workers (" + std::to_string(o.max_workers) + ")");
  if (o.min_workers > o.workers)
    s.fail("min_workers", core_errc::out_of_range,
           std::to_string(o.min_workers) + " is more than workers (" + std::to_string(o.workers) + ")");
  if (o.workers > o.max_workers)
    s.fail("workers", core_errc::out_of_range,
           std::to_string(o.workers) + " is more than max_workers (" + std::to_string(o.max_workers) + ")");
  return o;
}

ps_options read_ps(config_section s) {
  ps_options o;
  o.shards = static_cast<std::uint32_t>(s.get_int("shards", 1, 1, 256));
  o.checkpoint_every = std::chrono::milliseconds(s.get_int("checkpoint_every_ms", 2'000, 10, 3'600'000));
  o.full_checkpoint_every = static_cast<std::uint32_t>(s.get_int("full_checkpoint_every", 10, 1, 1'000'000));
  o.in_flight_pushes = static_cast<std::uint32_t>(s.get_int("in_flight_pushes", 2, 0, 64));
  o.prefetch = s.get_bool("prefetch", true);
  // Nodes run in other working directories (and on other hosts): a relative path would mean
  // something different to each of them.
  o.checkpoint_dir = s.get_string("checkpoint_dir", "");
  if (!o.checkpoint_dir.empty() && o.checkpoint_dir.front() != '/')
    s.fail("checkpoint_dir", core_errc::invalid_argument,
           "'" + o.checkpoint_dir + "' is not an absolute path (the PS shards of every host must find it)");
  return o;
}

}  // namespace

std::string ps_options::own_checkpoints(const std::string& job_dir) const {
  if (checkpoint_dir.empty()) return "";
  auto dir = std::filesystem::path(job_dir).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "jobs/x/"
  return checkpoint_dir + "/" + dir.filename().string();
}

std::string ps_options::checkpoints_of(const std::string& job_dir) const {
  if (checkpoint_dir.empty()) return job_dir + "/checkpoints";
  const auto own = own_checkpoints(job_dir);
  // A job started before 2026-12-03 wrote <checkpoint_dir>/ps-<i>: read (and resumed) there. A new
  // job's runner makes its own directory first (runner::create_job_dir), so it never lands there.
  std::error_code ec;
  if (!std::filesystem::exists(own, ec) && std::filesystem::is_directory(checkpoint_dir + "/ps-0", ec))
    return checkpoint_dir;
  return own;
}

namespace {
// A job file's paths are absolute by now (read_job_file: relative to the file); one still relative
// came from --set or a document in memory, and is the caller's, relative to its working directory.
// Nodes run elsewhere: the runner stores it absolute in the job directory's job.toml.
void make_model_paths_absolute(job_spec& spec) {
  for (auto* path : {&spec.nn.model.path, &spec.nn.model.init})
    if (!path->empty() && path->front() != '/') {
      std::error_code ec;
      *path = std::filesystem::absolute(*path, ec).lexically_normal().string();
    }
}
// An error about `key` where the job file (or its --set flag) gave it: "job.toml:8: key 'k': why".
unexpected key_refusal(const config_doc& doc, const std::string& key, const std::string& why) {
  return make_unexpected(core_errc::invalid_argument, doc.where(key) + ": key '" + key + "': " + why);
}
// What a job on the GPU cannot combine with.
expected<void> check_gpu_combinations(const job_spec& spec, const config_doc& doc) {
  // [train] device is `troupe train --local`'s switch (it reads job files too); a job's workers
  // follow [job] device.
  // Under async_ps the shards apply the embedding rows' gradients, which the GPU backend keeps on
  // the device (actors/src/worker/backends/cuda_backend.cpp says the same for a model built otherwise).
  // The other strategies refuse such a model (job_check.cpp): device "cpu" is the one way out (the
  // message advised allreduce or local_sgd until 2026-12-01).
  const auto& type = spec.nn.model.type;
  if (spec.uses_gpu() && spec.uses_ps() && (type == "deepfm" || type == "wide_deep"))
    return key_refusal(
        doc, "job.device",
        "\"gpu\" with strategy \"async_ps\" needs a model "
        "without embedding tables (model.type is \"" +
            type + "\"), and a model with embedding tables trains under async_ps only: use device \"cpu\"");
  // The device path of allreduce (actors/src/worker/strategies/allreduce_gpu.cpp) has no gradient
  // accumulation, which the goodput-optimal batch and the global batch rely on.
  const auto& batch = spec.nn.train.batch;
  if (spec.uses_gpu() && spec.traits().global_batch && batch != "fixed")
    return key_refusal(doc, "train.batch",
                       "\"" + batch +
                           "\" is not supported with job.device = \"gpu\" (the GPU allreduce path keeps "
                           "the job file's batch_size); use batch = \"fixed\", or device \"cpu\"");
  return {};
}
// batch = "auto" and "global" size the synchronous ring's step, lr_scaling scales its rate with it
// (actors/src/worker/goodput/): under the other strategies nothing would read them. Checked before
// the [train] keys' own rules, which a strategy that reads neither key would only mislead about
// (local_sgd with batch = "auto" was first asked for lr_scaling = "adascale", then refused).
expected<void> check_strategy_sizes_batch(const job_spec& spec, const config_doc& doc) {
  const auto& batch = spec.nn.train.batch;
  if (!traits_of(spec.job.strategy)) return {};  // an unknown strategy: its own error says so
  if (batch != "fixed" && !spec.traits().global_batch)
    return key_refusal(
        doc, "train.batch",
        "\"" + batch + "\" sizes an allreduce ring's step; job.strategy \"" + spec.job.strategy +
            "\" trains each worker at train.batch_size: remove the key, or use strategy \"allreduce\"");
  // The learning-rate rules follow the ring's global batch too: elsewhere the key was ignored.
  if (spec.nn.train.lr_scaling != "none" && !spec.traits().global_batch)
    return key_refusal(
        doc, "train.lr_scaling",
        "\"" + spec.nn.train.lr_scaling +
            "\" scales an allreduce ring's learning rate with its global batch; job.strategy \"" +
            spec.job.strategy +
            "\" steps each worker at train.batch_size with the job file's rate: remove the key, "
            "or use strategy \"allreduce\"");
  return {};
}
// batch = "global": a lone replica cuts the whole global batch from one task.
expected<void> check_global_batch(const job_spec& spec, const config_doc& doc) {
  const auto global = static_cast<std::uint64_t>(spec.job.workers) * spec.nn.train.batch_size;
  if (spec.nn.train.batch == "global" && spec.job.records_per_task < global)
    return key_refusal(doc, "train.batch",
                       "\"global\" keeps job.workers x train.batch_size = " + std::to_string(global) +
                           " rows per step, which one worker alone cuts from one "
                           "task: job.records_per_task (" +
                           std::to_string(spec.job.records_per_task) + ") must be at least that");
  // A ring's replica cuts its batch from one task: a task smaller than a batch cut every step short
  // (its learning rate scaled down by the step's share for the whole job, no noise-scale estimate).
  if (spec.traits().global_batch && spec.job.records_per_task < spec.nn.train.batch_size)
    return key_refusal(doc, "job.records_per_task",
                       std::to_string(spec.job.records_per_task) + " is below train.batch_size (" +
                           std::to_string(spec.nn.train.batch_size) +
                           "): each of a ring's steps is cut from one task, so every step would be "
                           "short (its learning rate scaled down to match): at least " +
                           std::to_string(spec.nn.train.batch_size));
  return {};
}
// batch = "auto" starts at the job file's global batch (M0 = job.workers x train.batch_size), each
// worker's micro-batch at train.batch_size: bounds below them were accepted and never applied.
expected<void> check_auto_batch_bounds(const job_spec& spec, const config_doc& doc) {
  const auto& t = spec.nn.train;
  if (t.batch != "auto") return {};
  const auto m0 = static_cast<std::uint64_t>(spec.job.workers) * t.batch_size;
  if (t.max_batch != 0 && t.max_batch < m0)
    return key_refusal(doc, "train.max_batch",
                       std::to_string(t.max_batch) +
                           " is below the global batch batch = \"auto\" starts at, job.workers x "
                           "train.batch_size = " +
                           std::to_string(m0) + " (it only grows from there): at least " +
                           std::to_string(m0) + ", or 0 for 16 x that");
  // Every replica of a ring trains at least a row a step: a ring of max_workers stayed above max_batch.
  const std::uint64_t most = t.max_batch != 0 ? t.max_batch : 16 * m0;
  if (most < spec.job.max_workers)
    return key_refusal(doc, t.max_batch != 0 ? "train.max_batch" : "job.max_workers",
                       "batch = \"auto\" keeps the global batch at most train.max_batch (" +
                           std::to_string(most) +
                           (t.max_batch != 0 ? "" : ", 16 x job.workers x train.batch_size") +
                           ") and every worker trains at least one row a step: job.max_workers (" +
                           std::to_string(spec.job.max_workers) + ") is more than that");
  if (t.max_local_batch < t.batch_size)
    return key_refusal(doc, "train.max_local_batch",
                       std::to_string(t.max_local_batch) + " is below train.batch_size (" +
                           std::to_string(t.batch_size) +
                           "), the micro-batch each worker starts at: at least that");
  return {};
}
// strategy "predict" runs an exported model over rows (the job `troupe predict` and `evaluate` write)
// and trains nothing; an exported model is only run, never trained. Either without the other was a
// job that "finished" with an untrained model's predictions, or failed in its first step.
std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

expected<void> check_prediction_pair(const job_spec& spec, const config_doc& doc) {
  const bool predict = !spec.traits().trains, exported = spec.nn.model.type == "exported";
  if (predict && !exported)
    return key_refusal(doc, "job.strategy",
                       "\"predict\" runs a trained model on rows (the job "
                       "`troupe predict` and `troupe evaluate` make) and trains nothing: to train, "
                       "use one of " +
                           join_names(training_strategies()));
  if (exported && !predict)
    return key_refusal(doc, "model.type",
                       "\"exported\" is a model directory to run (troupe "
                       "predict, evaluate, serve), not one to train: to train on from it, set "
                       "[model] init = \"" +
                           spec.nn.model.path + "\" with its own model type");
  return {};
}
}  // namespace

expected<job_spec> job_spec::read(const config_doc& doc, config_doc* effective) {
  config_reader r(doc);
  job_spec spec;
  spec.job = read_job(r.section("job"));
  spec.ps = read_ps(r.section("ps"));
  spec.nn = nn::read_job_config(r);
  spec.transport = transport_config::read(r.section("transport"));
  spec.log = log_config::read(r.section("log"), log_config{});
  spec.cluster = cluster::cluster_config::read(r.section("cluster"));
  if (auto g = check_strategy_sizes_batch(spec, doc); !g) return g.err();
  if (auto f = r.finish(); !f) return f.err();
  if (effective) *effective = r.effective();
  if (auto v = spec.transport.validate(); !v) return v.err();
  // Every node of a job listens on a free port of listen_host (the master's is picked by the
  // runner and kept across its restarts): one fixed port cannot serve them all.
  if (spec.transport.listen_port != 0)
    return key_refusal(doc, "transport.listen_port",
                       "a job's nodes each pick a free port "
                       "of transport.listen_host; remove the key");
  if (auto g = check_gpu_combinations(spec, doc); !g) return g.err();
  if (auto g = check_global_batch(spec, doc); !g) return g.err();
  if (auto a = check_auto_batch_bounds(spec, doc); !a) return a.err();
  if (auto p = check_prediction_pair(spec, doc); !p) return p.err();
  if (spec.job.dataset_cache.empty()) spec.job.dataset_cache = default_dataset_cache(spec.job.root);
  make_model_paths_absolute(spec);
  return spec;
}

strategy_traits job_spec::traits() const {
  return traits_of(job.strategy).value_or(strategy_traits{});
}

bool job_spec::uses_ps() const {
  return traits().uses_ps;
}

}  // namespace troupe::job
