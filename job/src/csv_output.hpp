// The stores an import writes: one in `out`, or `out`/train and `out`/test with a test fraction.
// Discarding them removes only what the import made: the LMDB files of the writers it created, and
// the directories that did not exist before (when they are empty again).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "troupe/job/csv_import.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::job {

// `import()` run: `result` once it succeeded; its error, with what it wrote in `out` discarded.
template <class Import>
expected<csv_import_result> imported_or_discarded(class csv_outputs& out, csv_import_result& result,
                                                  Import import);

class csv_outputs {
 public:
  explicit csv_outputs(const csv_import_options& o) : o_(o) {}

  // Creates the stores for rows read as `f` says (refusing a directory that already holds one) and
  // names them in `r` (train_dir, test_dir).
  expected<void> open(const storage::row_format& f, csv_import_result& r);
  expected<void> append(bool test, const storage::record& rec) {
    return stores_[test ? 1 : 0].writer->append(rec);
  }
  // Commits both stores with the classes and `f`; returns their manifests (train, test).
  expected<std::pair<storage::manifest, storage::manifest>> finish(std::uint32_t num_classes,
                                                                   const storage::row_format& f);
  void discard();

 private:
  struct store {
    explicit store(std::string d) : dir(std::move(d)) {}
    std::string dir;
    bool made_dir = false;
    std::optional<storage::record_writer> writer;
  };
  const csv_import_options& o_;
  std::vector<store> stores_;  // train, then test when split
  bool made_out_ = false;
};

template <class Import>
expected<csv_import_result> imported_or_discarded(csv_outputs& out, csv_import_result& result,
                                                  Import import) {
  if (auto r = import(); !r) {
    out.discard();
    return r.err();
  }
  return std::move(result);
}

}  // namespace troupe::job
