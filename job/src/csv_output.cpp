#include "csv_output.hpp"

#include <filesystem>

#include "csv_columns.hpp"

namespace troupe::job {

namespace fs = std::filesystem;

namespace {

// A split import writes OUT/train and OUT/test, one without a split OUT itself: into a directory
// that holds the other layout's stores it would write a second set beside them (a job reading OUT
// would then take either), so it is refused as a store already there is.
expected<void> check_not_the_other_layout(const std::string& out, bool split) {
  std::error_code ec;
  const fs::path o(out);
  if (split && fs::exists(o / "data.mdb", ec))
    return make_unexpected(storage::storage_errc::already_exists,
                           out +
                               ": already holds a store (one imported without --test-fraction; remove it "
                               "first, or import the split elsewhere)");
  if (!split)
    for (const char* part : {"train", "test"})
      if (fs::exists(o / part / "data.mdb", ec))
        return make_unexpected(storage::storage_errc::already_exists,
                               out + ": already holds a store in " + part +
                                   "/ (one imported with --test-fraction; remove it first, or import "
                                   "elsewhere)");
  return {};
}

}  // namespace

expected<void> csv_outputs::open(const storage::row_format& f, csv_import_result& r) {
  storage::record_schema s;
  s.dense_dim = static_cast<std::uint32_t>(f.dense.size());
  s.sparse_fields = static_cast<std::uint32_t>(f.sparse.size());
  s.num_classes = 2;
  s.buckets_per_field = f.buckets_per_field;
  const std::string source = "csv:" + o_.file + " label=" + f.label + " dense=" + joined(f.dense, ",") +
                             " sparse=" + joined(f.sparse, ",");
  const bool split = o_.test_fraction > 0;
  if (auto c = check_not_the_other_layout(o_.out, split); !c) return c;
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
