#include "troupe/model/state.hpp"

#include "troupe/model/model_dir.hpp"

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "troupe/cluster/job_dir.hpp"
#include "troupe/job/job_file.hpp"
#include "troupe/storage/errc.hpp"

namespace troupe::model {

namespace {

constexpr char meta_file[] = "/state.json";

std::string meta_json(const state_meta& m) {
  nlohmann::json j{{"version", m.version},
                   {"step", m.step},
                   {"from", m.from},
                   {"writer", m.writer},
                   {"written_unix_ms", m.written_unix_ms}};
  if (m.data_epoch) j["data_epoch"] = *m.data_epoch;
  return j.dump() + "\n";
}

// The meta of `version`: state.json when it names that version, else only what the version says.
state_meta read_meta(const std::string& dir, std::uint64_t version) {
  state_meta m;
  m.version = version;
  m.from = "checkpoint";
  std::ifstream in(dir + meta_file);
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || j.value("version", std::uint64_t{0}) != version) return m;
  m.described = true;
  m.step = j.value("step", std::uint64_t{0});
  if (j.contains("data_epoch") && j["data_epoch"].is_number_unsigned())
    m.data_epoch = j["data_epoch"].get<std::uint32_t>();
  m.from = j.value("from", std::string("checkpoint"));
  m.writer = j.value("writer", std::string());
  m.written_unix_ms = j.value("written_unix_ms", std::int64_t{0});
  return m;
}

// The count a version keeps under `key` (step_key, epoch_key: two floats as append_step writes them).
std::optional<std::uint64_t> kept_count(const storage::shard_state& s, const char* key) {
  auto k = s.dense_slots.find(key);
  if (k == s.dense_slots.end() || k->second.size() != 2) return std::nullopt;
  return read_step(k->second.data());
}

// A version read back: its meta from state.json, or where that describes another version, the
// data epoch the version keeps under epoch_key (held_steps reads its step_key).
loaded_state loaded(const std::string& dir, std::uint64_t version, storage::shard_state s) {
  loaded_state out{std::move(s), read_meta(dir, version), dir};
  if (!out.meta.described)
    if (auto e = kept_count(out.state, epoch_key)) out.meta.data_epoch = static_cast<std::uint32_t>(*e);
  return out;
}

bool has_store(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(dir + "/data.mdb", ec);
}

}  // namespace

void append_step(std::vector<float>& slots, std::uint64_t step) {
  float f[2];
  std::memcpy(f, &step, sizeof step);
  slots.push_back(f[0]);
  slots.push_back(f[1]);
}

std::uint64_t read_step(const float* two_floats) {
  std::uint64_t s;
  std::memcpy(&s, two_floats, sizeof s);
  return s;
}

void keep_meta_in(storage::flat_state& s, const state_meta& m) {
  std::vector<float> step;
  append_step(step, m.step);
  s.dense_slots.emplace_back(step_key, std::move(step));
  if (!m.data_epoch) return;
  std::vector<float> epoch;
  append_step(epoch, *m.data_epoch);
  s.dense_slots.emplace_back(epoch_key, std::move(epoch));
}

expected<state_writer> state_writer::open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_unexpected(core_errc::io_error, dir + ": " + ec.message());
  auto store = storage::checkpoint_store::open(dir);
  if (!store) return store.err();
  return state_writer(dir, std::move(*store));
}

expected<std::uint64_t> state_writer::write(const storage::flat_state& s, state_meta meta) {
  return finish(store_.write(s, storage::checkpoint_kind::full), std::move(meta));
}

expected<std::uint64_t> state_writer::write(const storage::shard_state& s, state_meta meta) {
  return finish(store_.write(s, storage::checkpoint_kind::full), std::move(meta));
}

expected<std::uint64_t> state_writer::finish(expected<std::uint64_t> v, state_meta meta) {
  if (!v) return v.err();
  meta.version = *v;
  const std::string path = dir_ + meta_file, tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << meta_json(meta);
    if (!out) return make_unexpected(core_errc::io_error, tmp + ": cannot be written");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return make_unexpected(core_errc::io_error, path + ": " + ec.message());
  if (auto c = store_.collect(2); !c) return c.err();
  return *v;
}

expected<std::uint64_t> write_state(const std::string& dir, const storage::flat_state& s, state_meta meta) {
  auto w = state_writer::open(dir);
  if (!w) return w.err();
  return w->write(s, std::move(meta));
}

expected<std::uint64_t> write_state(const std::string& dir, const storage::shard_state& s, state_meta meta) {
  auto w = state_writer::open(dir);
  if (!w) return w.err();
  return w->write(s, std::move(meta));
}

expected<std::optional<loaded_state>> read_state(const std::string& dir) {
  if (!has_store(dir)) return std::optional<loaded_state>();
  auto store = storage::checkpoint_store::open(dir);
  if (!store) return store.err();
  auto latest = store->latest();
  if (!latest) return latest.err();
  if (!*latest) return std::optional<loaded_state>();
  auto s = store->load(**latest);
  if (!s) return s.err();
  return std::optional<loaded_state>(loaded(dir, **latest, std::move(*s)));
}

namespace {
expected<std::optional<loaded_state>> read_older_state(const std::string& dir, const error& latest_error) {
  auto store = storage::checkpoint_store::open(dir);
  if (!store) return store.err();
  auto latest = store->latest();
  auto versions = store->list();
  if (!latest || !*latest || !versions) return latest_error;
  std::vector<std::uint64_t> older;
  for (const auto& v : *versions)
    if (v.complete && v.version < **latest) older.push_back(v.version);
  std::sort(older.rbegin(), older.rend());
  for (auto v : older) {
    auto s = store->load(v);
    if (s) return std::optional<loaded_state>(loaded(dir, v, std::move(*s)));
    spdlog::warn("{}: version {} cannot be read either: {}", dir, v, s.err().to_string());
  }
  return latest_error;
}
}  // namespace

expected<std::optional<loaded_state>> read_state_or_older(const std::string& dir) {
  auto s = read_state(dir);
  if (s) return s;
  spdlog::warn("{}: its latest version cannot be read ({}): trying the older one it keeps", dir,
               s.err().to_string());
  auto older = read_older_state(dir, s.err());
  if (older && *older)
    spdlog::warn("{}: read version {} (the latest cannot be read)", dir, (*older)->meta.version);
  return older;
}

state_places places_of(const std::string& job_dir, const std::string& ps_checkpoints,
                       std::uint32_t ps_shards) {
  state_places p;
  p.final_dir = job_dir + "/checkpoints/final";
  p.ring_dir = job_dir + "/checkpoints/ring";
  p.buffers_dir = job_dir + "/checkpoints/buffers";
  const std::string& ps = ps_checkpoints;
  for (std::uint32_t i = 0; i < ps_shards; ++i) p.ps_dirs.push_back(ps + "/ps-" + std::to_string(i));
  return p;
}

namespace {

// The shard's dense tensors the state lacks, and all its rows.
void merge_shard(storage::shard_state& into, storage::shard_state&& shard) {
  for (auto& [name, values] : shard.dense) into.dense.try_emplace(name, std::move(values));
  for (auto& [name, slots] : shard.dense_slots) into.dense_slots.try_emplace(name, std::move(slots));
  for (auto& [table, rows] : shard.embeddings) {
    auto& t = into.embeddings[table];
    for (auto& [id, row] : rows) t.insert_or_assign(id, std::move(row));
  }
  for (auto& [table, rows] : shard.embedding_slots) {
    auto& t = into.embedding_slots[table];
    for (auto& [id, row] : rows) t.insert_or_assign(id, std::move(row));
  }
}

// An async_ps job that wrote no final state: the shards hold the parameters, a worker's checkpoint
// its buffers (batch norm's statistics; the export had the module's own, running mean 0). One that
// cannot be read is passed over with a warning, as the workers pass it over: statistics a few
// batches relearn do not stop an export or a resume.
void merge_buffers(storage::shard_state& into, const std::string& dir) {
  if (dir.empty()) return;
  auto s = read_state(dir);
  if (!s)
    spdlog::warn("{}: the workers' buffers cannot be read, the module's own are kept: {}", dir,
                 s.err().to_string());
  else if (*s)
    merge_shard(into, std::move((*s)->state));
}

}  // namespace

std::uint64_t optimizer_steps(const storage::shard_state& s) {
  std::uint64_t steps = 0;
  for (const auto& [name, slots] : s.dense_slots)
    if (!name.starts_with('#') && slots.size() >= 2)
      steps = std::max(steps, read_step(slots.data() + slots.size() - 2));
  return steps;
}

std::uint64_t held_steps(const loaded_state& s) {
  // The version's own meta: its step, the writer's strategy's count (local_sgd's is its rounds, far
  // fewer than the optimizer's steps).
  if (s.meta.described) return s.meta.step;
  if (auto k = kept_count(s.state, step_key)) return *k;
  return optimizer_steps(s.state);
}

expected<loaded_state> job_state(const state_places& places) {
  std::optional<loaded_state> out;
  for (const auto* dir : {&places.final_dir, &places.ring_dir}) {
    auto s = read_state_or_older(*dir);
    if (!s) return s.err();
    if ((out = std::move(*s))) break;
  }
  if (out && !out->meta.described) out->meta.step = held_steps(*out);  // from its step_key, if any
  const bool shards_alone = !out;
  std::size_t shards = 0;
  for (const auto& dir : places.ps_dirs) {
    auto s = read_state(dir);
    if (!s) return s.err();
    if (!*s) continue;
    if (!out) {
      out = loaded_state{{}, (*s)->meta, dir};
      out->meta.writer = "the PS shards";
    }
    // Read from every shard: their directory (ps-0, ps-1, ...), where it named the first alone.
    if (shards_alone && ++shards == 2) out->dir = std::filesystem::path(dir).parent_path().string();
    merge_shard(out->state, std::move((*s)->state));
  }
  if (out && shards_alone) merge_buffers(out->state, places.buffers_dir);
  if (out) {
    // A node's own entries ("#noise_scale" of a PS shard, "#strategy" of a ring's writer) are its
    // run's, not the model's.
    std::erase_if(out->state.dense_slots, [](const auto& e) { return e.first.starts_with('#'); });
    // A writer that knew no step (an async_ps worker, whose optimizer is the shards'; a shard's own
    // checkpoint, which has no state.json): the optimizer's, from the step each slot vector keeps.
    if (out->meta.step == 0) out->meta.step = optimizer_steps(out->state);
    return std::move(*out);
  }
  std::ostringstream where;
  where << places.final_dir << ", " << places.ring_dir;
  for (const auto& d : places.ps_dirs) where << ", " << d;
  return make_unexpected(storage::storage_errc::not_found,
                         "no model state in " + where.str() + " (the job wrote no checkpoint yet)");
}

expected<loaded_state> init_state(const std::string& source) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(source + "/model.json", ec)) {
    // A damaged model directory (model.json no JSON, model.pt gone) is refused, not read for its
    // state alone as if whole.
    if (auto m = read_model_dir(source); !m) return m.err();
    auto s = read_state(source + "/state");
    if (!s) return s.err();
    if (!*s)
      return make_unexpected(
          storage::storage_errc::not_found,
          source +
              "/state: no state beside model.pt (a model directory copied without its state/ directory, or "
              "one from an older troupe? `troupe export` of the job writes one with it)");
    return std::move(**s);
  }
  if (!std::filesystem::is_regular_file(source + "/job.toml", ec))
    return make_unexpected(
        core_errc::invalid_argument,
        source + ": neither a model directory (model.json) nor a job directory (job.toml)");
  auto spec = job::load_job_spec(source);
  if (!spec) return spec.err();
  if (!spec->traits().trains)  // it said "the job wrote no checkpoint yet", as if one would come
    return make_unexpected(
        core_errc::invalid_argument,
        source + ": a prediction job (troupe predict or evaluate): it trained no model to start from");
  return job_state(places_of(source, spec->ps.checkpoints_of(source), spec->uses_ps() ? spec->ps.shards : 0));
}

}  // namespace troupe::model
