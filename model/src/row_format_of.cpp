#include "troupe/model/model_dir.hpp"

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

}  // namespace troupe::model
