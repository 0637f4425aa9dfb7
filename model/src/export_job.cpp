#include "troupe/model/export_job.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>

#include "export_place.hpp"
#include "model_json.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/job/data.hpp"
#include "troupe/job/data_model.hpp"
#include "troupe/job/job_file.hpp"
#include "troupe/model/exporter.hpp"
#include "troupe/nn/errc.hpp"
#include "troupe/nn/script_export.hpp"
#include "troupe/storage/errc.hpp"

namespace troupe::model {

namespace {

namespace fs = std::filesystem;

// Every dense tensor of the built-in model (parameters and batch norm's statistics) from the state.
expected<void> load_dense(nn::model& m, const storage::shard_state& s, const std::string& where) {
  for (auto* p : m.parameters()) {
    auto it = s.dense.find(p->name);
    if (it == s.dense.end() && !p->trainable) {  // a PS job's checkpoints hold no running statistics
      spdlog::warn("export: {} has no '{}': the model's initial values are kept", where, p->name);
      continue;
    }
    if (it == s.dense.end())
      return make_unexpected(storage::storage_errc::not_found,
                             where + ": the state has no tensor '" + p->name + "' (the job's model has)");
    if (it->second.size() != p->value.size())
      return make_unexpected(nn::nn_errc::bad_shape,
                             where + ": tensor '" + p->name + "' has " + std::to_string(it->second.size()) +
                                 " values in the state, " + std::to_string(p->value.size()) +
                                 " in the model " + p->value.dims().to_string());
    std::copy(it->second.begin(), it->second.end(), p->value.data());
  }
  return {};
}

// Every embedding row of the state into the built-in model's tables.
void load_rows(nn::model& m, const storage::shard_state& s) {
  for (auto* t : m.embedding_tables()) {
    auto it = s.embeddings.find(t->name());
    if (it == s.embeddings.end()) continue;
    for (const auto& [id, row] : it->second)
      if (row.size() == t->dim()) t->write_rows({&id, 1}, row.data());
  }
}

// Table `name`'s rows from the state, ids ascending as signed 64-bit values (the module's searchsorted).
export_table table_of(const storage::shard_state& s, const std::string& name, std::size_t dim,
                      const std::string& ids_attr, const std::string& rows_attr) {
  export_table t{ids_attr, rows_attr, dim, {}, {}};
  auto it = s.embeddings.find(name);
  if (it == s.embeddings.end()) return t;
  for (const auto& [id, row] : it->second)
    if (row.size() == dim) t.ids.push_back(static_cast<std::int64_t>(id));
  std::sort(t.ids.begin(), t.ids.end());
  t.rows.reserve(t.ids.size() * dim);
  for (auto id : t.ids) {
    const auto& row = it->second.at(static_cast<std::uint64_t>(id));
    t.rows.insert(t.rows.end(), row.begin(), row.end());
  }
  return t;
}

// The built-in model with the state's tensors, as a request; `m` keeps the model (for verification).
expected<export_request> built_in_request(const job::job_spec& spec, const storage::manifest& train,
                                          const loaded_state& st, std::unique_ptr<nn::model>& m) {
  // New rows at zero: an id the state lacks reads a zero row in the native model as in the export.
  job::job_spec zero_rows = spec;
  zero_rows.nn.model.embedding_scale = 0;
  auto built = job::build_model(zero_rows, train, "train");
  if (!built) return built.err();
  m = std::move(*built);
  if (auto l = load_dense(*m, st.state, st.dir); !l) return l.err();
  load_rows(*m, st.state);
  auto script = nn::to_torchscript(*m);
  if (!script) return script.err();
  export_request r;
  r.source = script->source;
  r.fields = train.schema.sparse_fields;
  std::map<std::string, nn::dense_param*> params;
  for (auto* p : m->parameters()) params[p->name] = p;
  for (const auto& t : script->tensors)
    r.tensors.push_back({t.attr, t.shape, params.at(t.name)->value.data()});
  for (const auto& t : script->tables)
    r.tables.push_back(table_of(st.state, t.name, t.dim, t.ids_attr, t.rows_attr));
  return r;
}

// A user's module: its trained tensors by the module's own names, its embedding rows.
export_request user_request(const job::job_spec& spec, const storage::manifest& train,
                            const loaded_state& st) {
  export_request r;
  r.user_module = spec.nn.model.path;
  r.fields = train.schema.sparse_fields;
  for (const auto& [name, values] : st.state.dense)
    r.tensors.push_back({name, {static_cast<std::int64_t>(values.size())}, values.data()});
  if (r.fields > 0)
    r.tables.push_back(table_of(st.state, "embedding", spec.nn.model.embedding_dim, "emb_ids", "emb_rows"));
  return r;
}

// Up to `n` test rows as the check inputs; the native model's logits on them in `expected_logits`.
expected<std::vector<float>> add_check(export_request& r, nn::model& m, const std::string& test_dir,
                                       std::size_t n) {
  auto store = storage::record_store::open_read_only(test_dir);
  if (!store) return store.err();
  nn::dataset d;
  if (auto rd = job::read_records(*store, 0, std::min<std::uint64_t>(n, store->count()), d); !rd)
    return rd.err();
  if (d.rows == 0) return std::vector<float>{};
  if (auto f = m.forward(nn::batch(d, 0, d.rows), false); !f) return f.err();
  const auto& l = m.logits();
  r.check_rows = d.rows;
  r.dense_dim = d.info.dense_dim;
  r.check_dense = d.dense;
  r.check_ids.assign(d.sparse.begin(), d.sparse.end());
  return std::vector<float>(l.data(), l.data() + l.size());
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  return worst;
}

// The export's request, and when it can be verified (a built-in model, verify_rows > 0) the
// native model's logits on its check rows. A built-in model's request points into `native`'s
// tensors: it lives as long.
struct prepared_export {
  std::unique_ptr<nn::model> native;
  export_request request;
  std::vector<float> want;
};

expected<prepared_export> prepare(const job::job_spec& spec, const storage::manifest& train,
                                  const loaded_state& st, const std::string& test_dir,
                                  std::size_t verify_rows) {
  prepared_export p;
  const bool user = spec.nn.model.type == "torchscript";
  expected<export_request> req = user ? expected<export_request>(user_request(spec, train, st))
                                      : built_in_request(spec, train, st, p.native);
  if (!req) return req.err();
  p.request = std::move(*req);
  if (p.native && verify_rows > 0) {
    auto w = add_check(p.request, *p.native, test_dir, verify_rows);
    if (!w) return w.err();
    p.want = std::move(*w);
  }
  return p;
}

// The exported module's logits against the native model's, on the rows verified.
expected<void> verify(export_report& rep, const std::vector<float>& want, const export_result& out,
                      const std::string& pt_path) {
  rep.max_abs_diff = max_abs_diff(want, out.check_logits);
  if (rep.verified_rows > 0 && !(rep.max_abs_diff <= 1e-4))
    return make_unexpected(core_errc::invalid_argument,
                           pt_path + ": its logits differ from the native model's by " +
                               std::to_string(rep.max_abs_diff) + " on " + std::to_string(rep.verified_rows) +
                               " test rows (a bug in the export: please report it)");
  return {};
}

// troupe's own copy of the tensors ([model] init reads it): no optimizer slots.
expected<void> write_tensors(const std::string& dir, loaded_state& st) {
  storage::shard_state tensors = std::move(st.state);
  tensors.dense_slots.clear();
  tensors.embedding_slots.clear();
  if (auto w = write_state(dir, tensors, st.meta); !w) return w.err();
  return {};
}

// The job's spec, unless the job trains nothing (a prediction job: it said "the job wrote no
// checkpoint yet", as if one would come).
expected<job::job_spec> trained_spec(const std::string& job_dir) {
  auto spec = job::load_job_spec(job_dir);
  if (!spec || spec->traits().trains) return spec;
  return make_unexpected(core_errc::invalid_argument,
                         job_dir + ": a prediction job (troupe predict or evaluate): it ran the model " +
                             spec->nn.model.path + " and trained none to export");
}

// The training rows' manifest and the test store whose rows verify the export. The job's own copy
// of the manifest when it has one (job::read_train_manifest): the store removed or damaged since,
// the model is still given out, unverified (said); a job without one needs its store.
struct export_rows {
  storage::manifest train;
  std::string test_dir;         // empty: not verified
  job::prepared_data prepared;  // its pin on the dataset cache entry, while the test rows are read
};
expected<export_rows> rows_of(const job::job_spec& spec, const std::string& job_dir,
                              std::size_t verify_rows) {
  auto copy = job::read_train_manifest(job_dir);
  if (!copy) return copy.err();
  if (!*copy || verify_rows > 0) {
    auto data = job::prepare_datasets(spec.nn.data, spec.job.dataset_cache);
    auto train = data ? storage::record_store::open_read_only(data->train_dir)
                      : expected<storage::record_store>(data.err());
    if (train) return export_rows{*copy ? std::move(**copy) : train->info(), data->test_dir, *data};
    if (!*copy) return train.err();
    spdlog::warn(
        "export: not verified on test rows: the job's data cannot be read ({}); its rows' shape and "
        "encoding are the job's copy ({})",
        train.err().to_string(), job::train_manifest_path(job_dir));
  }
  return export_rows{std::move(**copy), "", {}};
}

}  // namespace

expected<export_report> export_job(const export_options& o) {
  auto& clk = clock::system();
  const auto started = clk.now();
  auto spec = trained_spec(o.job_dir);
  if (!spec) return spec.err();
  // The place first: one an export may not replace is refused before any work.
  export_place place(o.out.empty() ? o.job_dir + "/model" : o.out);
  if (auto t = place.begin(); !t) return t.err();
  auto data = rows_of(*spec, o.job_dir, o.verify_rows);
  if (!data) return data.err();
  auto st = job_state(
      places_of(o.job_dir, spec->ps.checkpoints_of(o.job_dir), spec->uses_ps() ? spec->ps.shards : 0));
  if (!st) return st.err();
  auto prep = prepare(*spec, data->train, *st, data->test_dir, data->test_dir.empty() ? 0 : o.verify_rows);
  if (!prep) return prep.err();
  export_request& req = prep->request;
  req.out_path = place.tmp() + "/model.pt";
  auto out = export_torchscript(req);
  if (!out) return out.err();
  export_report rep;
  rep.dir = place.final_dir();
  rep.meta = st->meta;
  rep.state_dir = st->dir;
  rep.dense_tensors = st->state.dense.size();
  for (const auto& t : req.tables) rep.embedding_rows += t.ids.size();
  rep.verified_rows = req.check_rows;
  if (auto v = verify(rep, prep->want, *out, req.out_path); !v) return v.err();
  if (!out->kept.empty()) {  // every one named (the first alone was)
    std::string names;
    for (const auto& k : out->kept) names += (names.empty() ? "" : ", ") + k;
    spdlog::warn("export: {} tensor(s) of {} kept their saved values (no state): {}", out->kept.size(),
                 spec->nn.model.path, names);
  }
  if (auto j = write_model_json(place.tmp(), {*spec, data->train, o.job_dir, rep}); !j) return j.err();
  if (auto w = write_tensors(place.tmp() + "/state", *st); !w) return w.err();
  if (auto c = place.commit(); !c) return c.err();
  rep.seconds = std::chrono::duration<double>(clk.now() - started).count();
  return rep;
}

}  // namespace troupe::model
