#include "train_model_out.hpp"

#include "troupe/cluster/job_dir.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/model/export_job.hpp"
#include "troupe/model/state.hpp"

namespace troupe::cli {

storage::flat_state state_of(nn::model& m) {
  storage::flat_state s;
  for (auto* p : m.parameters())
    s.dense.emplace_back(p->name, std::vector<float>(p->value.begin(), p->value.end()));
  for (auto* t : m.embedding_tables()) {
    storage::flat_rows rows{t->name(), t->dim(), {}, {}};
    t->for_each([&](std::uint64_t id, const float* row) {
      rows.ids.push_back(id);
      rows.values.insert(rows.values.end(), row, row + t->dim());
    });
    s.embeddings.push_back(std::move(rows));
  }
  return s;
}

expected<std::string> write_local_model(const config_doc& doc, const job::job_spec& spec,
                                        const storage::flat_state& state, const nlohmann::json& result,
                                        std::uint64_t steps) {
  auto& clk = clock::system();
  const std::string id = spec.job.name + "-local-" + std::to_string(clk.wall_ms());
  auto dir = cluster::job_dir::create(spec.job.root, id, doc.to_toml());
  if (!dir) return dir.err();
  // How it ended, as a runner's result.json says it: `troupe jobs` lists it finished, and
  // `troupe jobs prune` can tell it ended (without it, it read as a dead job and was kept for good).
  auto ended = result;
  if (!ended.contains("status")) ended["status"] = "finished";
  if (auto w = cluster::write_file_atomic(dir->result_path(), ended.dump() + "\n"); !w) return w.err();
  model::state_meta meta;
  meta.step = steps;
  if (spec.nn.train.epochs > 0) meta.data_epoch = static_cast<std::uint32_t>(spec.nn.train.epochs - 1);
  meta.from = "final";
  meta.writer = "train --local";
  meta.written_unix_ms = clk.wall_ms();
  if (auto w = model::write_state(dir->path() + "/checkpoints/final", state, meta); !w) return w.err();
  auto e = model::export_job({dir->path(), "", 2048});
  if (!e) return e.err();
  return e->dir;
}

}  // namespace troupe::cli
