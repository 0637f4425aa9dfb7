// The CSV importer tests' fixture (csv_import_test, csv_users_test): a scratch folder, a CSV written
// into it with the import's options (label "y", 1,000 buckets a field), a refused import's message
// (invalid_argument, and no store left behind), and a store's records read back.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "scratch_test.hpp"
#include "troupe/job/csv_import.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::job::testing {

class csv_fixture : public test_util::scratch_test {
 protected:
  explicit csv_fixture(const std::string& scratch) : scratch_test(scratch) {}
  // Writes `text` to <dir>/<out>.csv; options importing it into <dir>/<out> with label "y".
  csv_import_options csv(const std::string& text, const std::string& out = "out") {
    csv_import_options o;
    o.file = write(out + ".csv", text);
    o.out = path(out);
    o.label = "y";
    o.buckets_per_field = 1000;
    return o;
  }
  // The import's error text (it must fail, with invalid_argument, leaving no store).
  std::string refused(const csv_import_options& o) {
    auto r = import_csv(o);
    EXPECT_FALSE(r);
    if (r) return "";
    EXPECT_TRUE(r.err() == core_errc::invalid_argument) << r.err().to_string();
    EXPECT_FALSE(std::filesystem::exists(o.out)) << "a failed import left " << o.out;
    return r.err().to_string();
  }
};

// Every record of the store in `dir`, in order.
inline std::vector<storage::record> records(const std::string& dir) {
  auto s = storage::record_store::open(dir);
  EXPECT_TRUE(s) << s.err().to_string();
  std::vector<storage::record> out;
  if (s) {
    EXPECT_TRUE(s->read_batch(0, s->count(), out));
  }
  return out;
}

}  // namespace troupe::job::testing
