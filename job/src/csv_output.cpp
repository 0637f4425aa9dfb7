#include "csv_output.hpp"

#include <filesystem>

#include "csv_columns.hpp"

namespace troupe::job {

namespace fs = std::filesystem;

expected<void> csv_outputs::open(const storage::row_format& f, csv_import_result& r) {
  storage::record_schema s;
  s.dense_dim = static_cast<std::uint32_t>(f.dense.size());
  s.sparse_fields = static_cast<std::uint32_t>(f.sparse.size());
  s.num_classes = 2;
  s.buckets_per_field = f.buckets_per_field;
  const std::string source = "csv:" + o_.file + " label=" + f.label + " dense=" + joined(f.dense, ",") +
                             " sparse=" + joined(f.sparse, ",");
  const bool split = o_.test_fraction > 0;
  std::error_code ec;
  made_out_ = split && !fs::exists(o_.out, ec);
  stores_.emplace_back(split ? (fs::path(o_.out) / "train").string() : o_.out);
  if (split) stores_.emplace_back((fs::path(o_.out) / "test").string());
  for (std::size_t i = 0; i < stores_.size(); ++i) {
    auto& st = stores_[i];
    st.made_dir = !fs::exists(st.dir, ec);
    auto w =
        storage::record_writer::create(st.dir, s, source + (split ? (i == 0 ? " (train)" : " (test)") : ""));
    if (!w) return w.err();
    st.writer.emplace(std::move(*w));
  }
  r.train_dir = stores_[0].dir;
  if (split) r.test_dir = stores_[1].dir;
  return {};
}

expected<std::pair<storage::manifest, storage::manifest>> csv_outputs::finish(std::uint32_t num_classes,
                                                                              const storage::row_format& f) {
  std::pair<storage::manifest, storage::manifest> out;
  for (std::size_t i = 0; i < stores_.size(); ++i) {
    auto& w = *stores_[i].writer;
    w.set_num_classes(num_classes);
    w.set_columns(f);
    auto m = w.finish();
    if (!m) return m.err();
    (i == 0 ? out.first : out.second) = std::move(*m);
  }
  return out;
}

void csv_outputs::discard() {
  std::error_code ec;
  for (auto it = stores_.rbegin(); it != stores_.rend(); ++it) {
    if (it->writer) {
      it->writer.reset();
      fs::remove(fs::path(it->dir) / "data.mdb", ec);
      fs::remove(fs::path(it->dir) / "lock.mdb", ec);
    }
    if (it->made_dir) fs::remove(it->dir, ec);  // fails, harmlessly, when something else is in it
  }
  if (made_out_) fs::remove(o_.out, ec);
}

}  // namespace troupe::job
