// Disk faults read as what they are, and the journal's counters survive a reopen.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "disk_faults.hpp"
#include "journal_ops.hpp"
#include "test_dir.hpp"
#include "troupe/storage/disk_fault.hpp"
#include "troupe/storage/errc.hpp"
#include "troupe/storage/record_store.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::storage {
namespace {

using testing::complete;
using testing::lease;
using testing::temp_dir;

TEST(disk_fault, enospc_names_the_path) {
  auto e = disk_fault(ENOSPC, "/some/dir", "commit");
  ASSERT_TRUE(e);
  EXPECT_TRUE(is_disk_fault(*e));
  EXPECT_EQ(*e, storage_errc::disk_full);
  EXPECT_NE(e->to_string().find("no space left on device: /some/dir (commit)"), std::string::npos)
      << e->to_string();
  EXPECT_FALSE(disk_fault(EINVAL, "/some/dir", "commit"));
  temp_dir d;  // plenty of space here: an EIO is an I/O error, not a full disk
  auto io = disk_fault(EIO, d.str(), "read");
  ASSERT_TRUE(io);
  EXPECT_EQ(*io, storage_errc::disk_io);
}

TEST(disk_fault, a_store_built_on_a_full_disk_says_no_space_left) {
  temp_dir base;
  test_util::small_tmpfs fs(base.str(), "256k");
  if (!fs.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  record_schema schema;
  schema.dense_dim = 256;
  auto w = record_writer::create(base.sub("store"), schema, "test");
  ASSERT_TRUE(w) << w.err().to_string();
  record r;
  r.dense.assign(256, 1.0f);
  expected<void> last;
  for (int i = 0; i < 10000 && last; ++i) last = w->append(r);
  if (last)
    if (auto m = w->finish(); !m) last = expected<void>(m.err());
  ASSERT_FALSE(last) << "256 KiB held 10000 records of 1 KiB?";
  EXPECT_EQ(last.err(), storage_errc::disk_full) << last.err().to_string();
  EXPECT_NE(last.err().to_string().find("no space left on device: " + base.sub("store")), std::string::npos)
      << last.err().to_string();
}

// On a disk already full, LMDB's lock file had no block behind its mapping: the process died of
// SIGBUS (troupe data import, a run's dataset cache, a PS checkpoint directory). Now ENOSPC, named.
TEST(disk_fault, a_store_created_on_a_disk_already_full_says_no_space_left) {
  temp_dir base;
  test_util::small_tmpfs fs(base.str(), "256k");
  if (!fs.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  fs.fill();
  record_schema schema;
  schema.dense_dim = 4;
  auto w = record_writer::create(base.sub("store"), schema, "test");
  ASSERT_FALSE(w) << "a store on a full disk";
  EXPECT_EQ(w.err(), storage_errc::disk_full) << w.err().to_string();
  EXPECT_NE(w.err().to_string().find("no space left on device: " + base.sub("store")), std::string::npos)
      << w.err().to_string();
  fs.free_space();
  std::filesystem::remove_all(base.sub("store"));
  EXPECT_TRUE(record_writer::create(base.sub("store"), schema, "test")) << "once there is room again";
}

journal_options opts() {
  journal_options o;
  o.dataset = "ds";
  o.record_count = 1005;
  o.records_per_task = 100;
  o.epochs = 2;
  o.max_failures = 3;
  o.shuffle = false;  // tasks 0 and 1 hold 100 records each
  return o;
}

TEST(journal_counters, requeues_and_records_done_survive_a_reopen) {
  temp_dir d;
  {
    auto j = task_journal::open_or_create(d.str(), opts());
    ASSERT_TRUE(j);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(lease(*j, "w0", 1000));
    ASSERT_EQ(j->requeue_holder("w0").value(), 3u);
    for (int i = 0; i < 2; ++i) {
      auto t = lease(*j, "w1", 1000);
      ASSERT_TRUE(t && *t);
      ASSERT_TRUE(complete(*j, (*t)->id, "w1", (*t)->attempt));
    }
    ASSERT_EQ(j->requeue_expired(2000).value(), 0u);
  }
  auto j = task_journal::open(d.str());
  ASSERT_TRUE(j);
  auto c = j->counts();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->requeued, 3u);
  EXPECT_EQ(c->records_done, 200u);
}

}  // namespace
}  // namespace troupe::storage
