#include "troupe/model/state.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "troupe/cluster/job_dir.hpp"
#include "troupe/storage/errc.hpp"

namespace troupe::model {

namespace {

constexpr char meta_file[] = "/state.json";

std::string meta_json(const state_meta& m) {
  nlohmann::json j{{"version", m.version},
                   {"step", m.step},
                   {"data_epoch", m.data_epoch},
                   {"tasks_done", m.tasks_done},
                   {"from", m.from},
                   {"writer", m.writer},
                   {"written_unix_ms", m.written_unix_ms}};
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
  m.step = j.value("step", std::uint64_t{0});
  m.data_epoch = j.value("data_epoch", 0u);
  m.tasks_done = j.value("tasks_done", std::uint64_t{0});
  m.from = j.value("from", std::string("checkpoint"));
  m.writer = j.value("writer", std::string());
  m.written_unix_ms = j.value("written_unix_ms", std::int64_t{0});
  return m;
}

bool has_store(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(dir + "/data.mdb", ec);
}

}  // namespace

expected<std::uint64_t> write_state(const std::string& dir, const storage::flat_state& s, state_meta meta) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_unexpected(core_errc::io_error, dir + ": " + ec.message());
  auto store = storage::checkpoint_store::open(dir);
  if (!store) return store.err();
  auto v = store->write(s, storage::checkpoint_kind::full);
  if (!v) return v.err();
  meta.version = *v;
  if (auto w = cluster::write_file_atomic(dir + meta_file, meta_json(meta)); !w) return w.err();
  if (auto c = store->collect(2); !c) return c.err();
  return *v;
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
  return std::optional<loaded_state>(loaded_state{std::move(*s), read_meta(dir, **latest), dir});
}

state_places places_of(const std::string& job_dir, const std::string& ps_checkpoint_dir,
                       std::uint32_t ps_shards) {
  state_places p;
  p.final_dir = job_dir + "/checkpoints/final";
  p.ring_dir = job_dir + "/checkpoints/ring";
  const std::string ps = ps_checkpoint_dir.empty() ? job_dir + "/checkpoints" : ps_checkpoint_dir;
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

}  // namespace

expected<loaded_state> job_state(const state_places& places) {
  std::optional<loaded_state> out;
  for (const auto* dir : {&places.final_dir, &places.ring_dir}) {
    auto s = read_state(*dir);
    if (!s) return s.err();
    if ((out = std::move(*s))) break;
  }
  for (const auto& dir : places.ps_dirs) {
    auto s = read_state(dir);
    if (!s) return s.err();
    if (!*s) continue;
    if (!out) {
      out = loaded_state{{}, (*s)->meta, dir};
      out->meta.writer = "the PS shards";
    }
    merge_shard(out->state, std::move((*s)->state));
  }
  if (out) return std::move(*out);
  std::ostringstream where;
  where << places.final_dir << ", " << places.ring_dir;
  for (const auto& d : places.ps_dirs) where << ", " << d;
  return make_unexpected(storage::storage_errc::not_found,
                         "no model state in " + where.str() + " (the job wrote no checkpoint yet)");
}

}  // namespace troupe::model
