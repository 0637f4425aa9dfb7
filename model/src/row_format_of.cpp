#include <filesystem>

#include "troupe/model/model_dir.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::model {

expected<storage::row_format> row_format_of(const model_info& m) {
  if (!m.columns)
    return make_unexpected(core_errc::invalid_argument,
                           m.dir +
                               "/model.json has no columns: the model's data did not come from `troupe data "
                               "import csv`, so raw rows cannot be encoded for it (give a record store)");
  const auto& c = *m.columns;
  storage::row_format f;
  f.header = c.header;
  f.label = c.label;
  f.dense = c.dense;
  f.sparse = c.sparse;
  f.delimiter = c.delimiter.empty() ? ',' : c.delimiter[0];
  f.missing = c.missing;
  f.hash = c.hash;
  f.buckets_per_field = m.buckets_per_field;
  f.class_names = m.class_names;
  for (const auto& d : c.dense)
    if (auto it = c.standardize.find(d); it != c.standardize.end())
      f.standardize.push_back({d, it->second.mean, it->second.std});
  if (c.missing == "mean")
    for (const auto& d : c.dense) f.fill.push_back(c.fill.at(d));
  return f;
}

expected<std::string> check_init_encoding(const std::string& init, const std::string& train_store) {
  std::error_code ec;
  std::string dir;
  for (const auto& d : {init, init + "/model"})
    if (dir.empty() && std::filesystem::is_regular_file(d + "/model.json", ec)) dir = d;
  if (dir.empty()) return std::string();
  auto m = read_model_dir(dir);
  if (!m || !m->columns) return std::string();
  auto store = storage::record_store::open_read_only(train_store);
  if (!store || !store->info().columns) return std::string();
  auto trained = row_format_of(*m);
  if (!trained) return std::string();
  const std::string a = "the init model's data (" + dir + "/model.json)",
                    b = "this job's (" + train_store + ")";
  if (auto d = storage::encoding_difference(*trained, *store->info().columns, a, b, {true, false});
      !d.empty())
    return make_unexpected(core_errc::invalid_argument,
                           "model.init " + init + ": the rows are encoded otherwise: " + d +
                               " (import the new rows with `troupe data import csv --like " + dir +
                               "`, which encodes them as the model's were)");
  if (auto d = storage::encoding_difference(*trained, *store->info().columns, a, b); !d.empty())
    return "model.init " + init + ": " + d +
           ": the warm-started weights read the new rows scaled otherwise (`troupe data import csv --like " +
           dir + "` encodes them as the model's were)";
  return std::string();
}

}  // namespace troupe::model
