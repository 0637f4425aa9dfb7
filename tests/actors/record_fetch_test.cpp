// A worker's record fetcher (record_fetcher) against a record_server behind an in-process channel:
// tasks come in bounded replies and decode to the stored rows, a task fetched once comes from the
// cache (bounded: the least recently used goes), a silent server is asked again until it answers,
// a corrupt or refused range fails only its ticket and is never cached. On a manual clock, the limits
// on a silent server end at the right clock time, without real waiting.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <mutex>

#include "fake_node.hpp"
#include "master/record_server.hpp"
#include "server_channel.hpp"
#include "troupe/job/data.hpp"
#include "worker/record_fetch.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;

using testing::server_channel;

class record_fetch_test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("record-fetch-test");
    ASSERT_TRUE(job::write_dataset(testing::tiny_dataset(), dir_ + "/train", "test"));
    ASSERT_TRUE(job::write_dataset(testing::tiny_dataset(), dir_ + "/test", "test"));
    node_.emplace(node_identity{node_id{"master", 1}, cluster::node_role::master, 0, dir_, "job", "job", 0});
    server_.emplace(*node_, data_paths{dir_ + "/train", dir_ + "/test"}, 7 * 12);  // 7 records a reply
    channel_.emplace(*server_, node_id{"worker-0", 1});
  }
  void TearDown() override {
    fetch_.reset();
    std::filesystem::remove_all(dir_);
  }
  record_fetcher& fetcher(std::size_t cache_bytes = 1 << 20, const std::string& spill_dir = "",
                          std::size_t request_records = 0, std::size_t window = 8,
                          troupe::clock& clk = troupe::clock::system()) {
    record_fetcher::options o;
    if (request_records > 0) o.request_bytes = request_records * 12;
    o.window = window;
    o.cache_bytes = cache_bytes;
    o.spill_dir = spill_dir;
    o.spill_bytes = spill_dir.empty() ? 0 : 1 << 20;
    fetch_.emplace(*channel_, o, clk);
    auto m = fetch_->manifest(false, 5s);
    EXPECT_TRUE(m) << m.err().to_string();
    return *fetch_;
  }
  // Waits (up to 10 s) for the ticket's records.
  expected<void> take(std::uint64_t ticket, nn::dataset& out) {
    if (!fetch_->wait(ticket, troupe::clock::system().now() + 10s))
      return make_unexpected(core_errc::io_error, "test: no records within 10 s");
    auto r = fetch_->take(ticket, out);
    if (!r) return make_unexpected(core_errc::io_error, "test: wait() returned before the records");
    return *r;
  }
  int calls() {
    std::lock_guard lk(channel_->mu);
    return channel_->calls;
  }

  std::string dir_;
  std::optional<testing::fake_node> node_;
  std::optional<record_server> server_;
  std::optional<server_channel> channel_;
  // The manual clock of the on_a_manual_clock tests: a member, so that it outlives the fetcher whose
  // thread reads it (a clock local to the test body was destroyed first: a segfault in 1 run of 5).
  manual_clock manual_;
  std::optional<record_fetcher> fetch_;
};

TEST_F(record_fetch_test, a_task_comes_in_bounded_replies_and_then_from_the_cache) {
  auto& f = fetcher();
  nn::dataset d;
  ASSERT_TRUE(take(f.want(3, 20), d));
  ASSERT_EQ(d.rows, 20u);
  for (std::size_t i = 0; i < 20; ++i) EXPECT_EQ(d.dense_row(i)[0], static_cast<float>(3 + i));
  EXPECT_EQ(calls(), 1 + 3);  // the manifest, then 7 + 7 + 6 records
  nn::dataset again;
  ASSERT_TRUE(take(f.want(3, 20), again));
  EXPECT_EQ(again.dense, d.dense);
  EXPECT_EQ(calls(), 4) << "the second lease of the task needs no request";
  EXPECT_EQ(f.counters().cache_hits, 1u);
  EXPECT_EQ(f.counters().fetched, 1u);
}

TEST_F(record_fetch_test, ranges_are_asked_for_in_requests_with_several_in_flight_across_tasks) {
  auto& f = fetcher(1 << 20, "", 3, 6);  // requests of 3 records (4 a task), 6 in flight
  std::vector<std::uint64_t> tickets;
  {
    // The four tasks are all queued before the fetcher's first request goes out (its send waits for
    // the channel's lock), so that the window's use does not depend on how the two threads are
    // scheduled: before, on a loaded machine the fetcher could ask for and take the whole first task
    // before the next was queued, and never had more than its 4 requests in flight.
    std::lock_guard lk(channel_->mu);
    for (std::uint64_t first : {0, 10, 20, 30}) tickets.push_back(f.want(first, 10));
  }
  for (std::size_t t = 0; t < tickets.size(); ++t) {
    nn::dataset d;
    ASSERT_TRUE(take(tickets[t], d));
    ASSERT_EQ(d.rows, 10u);
    for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(d.dense_row(i)[0], static_cast<float>(10 * t + i));
  }
  EXPECT_EQ(calls(), 1 + 4 * 4) << "the manifest, then 3 + 3 + 3 + 1 records a task";
  std::lock_guard lk(channel_->mu);
  EXPECT_EQ(channel_->most_in_flight, 6u)
      << "the window (the next task's requests beside this one's), never more";
}

TEST_F(record_fetch_test, a_window_of_one_fetches_the_same_records_one_request_at_a_time) {
  auto& f = fetcher(1 << 20, "", 0, 1);
  nn::dataset d;
  ASSERT_TRUE(take(f.want(3, 20), d));
  for (std::size_t i = 0; i < 20; ++i) EXPECT_EQ(d.dense_row(i)[0], static_cast<float>(3 + i));
  EXPECT_EQ(calls(), 1 + 3);  // bounded replies of 7: the rest asked for twice
  std::lock_guard lk(channel_->mu);
  EXPECT_EQ(channel_->most_in_flight, 1u);
}

TEST_F(record_fetch_test, the_cache_is_bounded_and_the_least_recently_used_task_goes) {
  auto& f = fetcher(10 * 12);  // room for one task of 10 records
  nn::dataset d;
  ASSERT_TRUE(take(f.want(0, 10), d));
  ASSERT_TRUE(take(f.want(10, 10), d));
  int before = calls();
  ASSERT_TRUE(take(f.want(10, 10), d));
  EXPECT_EQ(calls(), before) << "the latest task is cached";
  ASSERT_TRUE(take(f.want(0, 10), d));
  EXPECT_GT(calls(), before) << "the first one was evicted and is fetched again";
  EXPECT_EQ(d.dense_row(0)[0], 0.0f);
}

TEST_F(record_fetch_test, tasks_pushed_out_of_memory_come_back_from_the_spill_file_of_this_host) {
  auto& f = fetcher(10 * 12, dir_ + "/spill");
  nn::dataset d;
  ASSERT_TRUE(take(f.want(0, 10), d));
  ASSERT_TRUE(take(f.want(10, 10), d));  // pushes the first task out, into the spill file
  int before = calls();
  ASSERT_TRUE(take(f.want(0, 10), d));
  EXPECT_EQ(calls(), before) << "no request: the first task came from the spill file";
  EXPECT_EQ(f.counters().spill_hits, 1u);
  EXPECT_EQ(d.dense_row(9)[0], 9.0f);
  // Another worker of this host (a fresh fetcher, nothing in its memory) finds it there too.
  auto& other = fetcher(10 * 12, dir_ + "/spill");
  before = calls();
  ASSERT_TRUE(take(other.want(0, 10), d));
  EXPECT_EQ(calls(), before);
}

TEST_F(record_fetch_test, a_spill_dir_that_cannot_be_made_turns_spilling_off_and_records_still_come) {
  std::ofstream(dir_ + "/not-a-dir") << "x";
  auto& f = fetcher(10 * 12, dir_ + "/not-a-dir/spill");
  nn::dataset d;
  ASSERT_TRUE(take(f.want(0, 10), d));
  ASSERT_TRUE(take(f.want(10, 10), d));
  int before = calls();
  ASSERT_TRUE(take(f.want(0, 10), d));
  EXPECT_GT(calls(), before) << "fetched again from the server";
  EXPECT_EQ(d.dense_row(3)[0], 3.0f);
}

// Records read back from the spill file are trusted as the server's: one another user could write
// (the default directory was shared by every user of the host, world-readable) let them feed a
// job labels of theirs. An entry that is not this user's alone, or a directory others may write
// in without the sticky bit, is not used; the records come from the server.
TEST_F(record_fetch_test, a_spill_file_another_user_could_write_is_never_read) {
  auto& f = fetcher(10 * 12, dir_ + "/spill");
  nn::dataset d;
  ASSERT_TRUE(take(f.want(0, 10), d));
  ASSERT_TRUE(take(f.want(10, 10), d));  // the first task spilled
  std::string entry;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/spill")) entry = e.path().string();
  ASSERT_FALSE(entry.empty());
  struct stat st {};
  ASSERT_EQ(::stat(entry.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "the entry is made this user's alone";
  ASSERT_EQ(::chmod(entry.c_str(), 0777), 0);
  auto& other = fetcher(10 * 12, dir_ + "/spill");
  int before = calls();
  ASSERT_TRUE(take(other.want(0, 10), d));
  EXPECT_GT(calls(), before) << "an entry others may write is not read";
  ASSERT_EQ(::chmod(entry.c_str(), 0700), 0);
  ASSERT_EQ(::chown(entry.c_str(), 65534, 65534), 0);
  auto& third = fetcher(10 * 12, dir_ + "/spill");
  before = calls();
  ASSERT_TRUE(take(third.want(0, 10), d));
  EXPECT_GT(calls(), before) << "nor one another user owns";
  ASSERT_EQ(::chown(entry.c_str(), ::geteuid(), ::getegid()), 0);
  ASSERT_EQ(::chmod((dir_ + "/spill").c_str(), 0777), 0);
  auto& fourth = fetcher(10 * 12, dir_ + "/spill");
  before = calls();
  ASSERT_TRUE(take(fourth.want(0, 10), d));
  EXPECT_GT(calls(), before) << "nor one in a directory others may write in (no sticky bit)";
  ASSERT_EQ(::chmod((dir_ + "/spill").c_str(), 01777), 0);
  auto& fifth = fetcher(10 * 12, dir_ + "/spill");
  before = calls();
  ASSERT_TRUE(take(fifth.want(0, 10), d));
  EXPECT_EQ(calls(), before) << "a sticky directory (as /tmp) is fine: the entry is this user's";
  EXPECT_EQ(fifth.counters().spill_hits, 1u);
  // Another user's directory, even sticky (made first at this user's default path): its owner can
  // rename the entries in it.
  ASSERT_EQ(::chown((dir_ + "/spill").c_str(), 65534, 65534), 0);
  auto& sixth = fetcher(10 * 12, dir_ + "/spill");
  before = calls();
  ASSERT_TRUE(take(sixth.want(0, 10), d));
  EXPECT_GT(calls(), before) << "nor one in another user's directory";
}

TEST_F(record_fetch_test, a_silent_server_is_asked_again_until_it_answers) {
  auto& f = fetcher();
  {
    std::lock_guard lk(channel_->mu);
    channel_->silent = 3;  // the master killed and relaunched meanwhile
  }
  nn::dataset d;
  ASSERT_TRUE(take(f.want(0, 5), d));
  EXPECT_EQ(d.rows, 5u);
  EXPECT_EQ(f.counters().retries, 3u);
}

TEST_F(record_fetch_test, a_corrupt_range_fails_its_ticket_and_is_not_cached) {
  auto& f = fetcher();
  {
    std::lock_guard lk(channel_->mu);
    channel_->corrupt = true;
  }
  nn::dataset d;
  auto bad = take(f.want(20, 5), d);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().to_string().find("served record: record 20: checksum mismatch"), std::string::npos)
      << bad.err().to_string();
  {
    std::lock_guard lk(channel_->mu);
    channel_->corrupt = false;
  }
  int before = calls();
  ASSERT_TRUE(take(f.want(20, 5), d));
  EXPECT_GT(calls(), before) << "fetched again, not taken from the cache";
  EXPECT_EQ(d.dense_row(0)[0], 20.0f);
}

TEST_F(record_fetch_test, a_refused_range_fails_its_ticket_naming_it_and_the_test_set_comes_whole) {
  auto& f = fetcher();
  nn::dataset d;
  auto bad = take(f.want(35, 10), d);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().to_string().find("records [35, 35 + 10) are outside the store of 40 records"),
            std::string::npos)
      << bad.err().to_string();
  auto t = f.test_set(5s);
  ASSERT_TRUE(t) << t.err().to_string();
  EXPECT_EQ(t->rows, 40u);
  EXPECT_EQ(t->labels[3], 1.0f);
}

TEST_F(record_fetch_test, on_a_manual_clock_a_silent_server_fails_the_manifest_at_its_limit) {
  auto& clk = manual_;
  channel_->silent = 1 << 20;
  record_fetcher::options o;
  fetch_.emplace(*channel_, o, clk);
  const auto t0 = clk.now();
  auto m = fetch_->manifest(false, 5s);
  ASSERT_FALSE(m);
  EXPECT_NE(m.err().to_string().find("no answer from master within 5000 ms"), std::string::npos)
      << m.err().to_string();
  // Asked again after 20, 40, ... ms (at most 500): it gives up when the next pause would end past
  // the limit, so the clock reads within the last pause before it; no real time was spent.
  EXPECT_GT(clk.now() - t0, 4500ms);
  EXPECT_LE(clk.now() - t0, 5s);
  EXPECT_GT(calls(), 10);
}

TEST_F(record_fetch_test, on_a_manual_clock_the_test_set_of_a_silent_server_fails_once_its_limit_passed) {
  auto& clk = manual_;
  auto& f = fetcher(1 << 20, "", 0, 8, clk);
  {
    std::lock_guard lk(channel_->mu);
    channel_->records_silent = true;  // the manifest comes, the records never do
  }
  const auto t0 = clk.now();
  auto t = f.test_set(10s);
  ASSERT_FALSE(t);
  EXPECT_NE(t.err().to_string().find("no answer from master (records 0..)"), std::string::npos)
      << t.err().to_string();
  // Asked again after 50, 100, ... ms (at most 1 s) until the limit has passed.
  EXPECT_GE(clk.now() - t0, 10s);
  EXPECT_LT(clk.now() - t0, 11s);
  EXPECT_GT(f.counters().retries, 10u);
}

TEST_F(record_fetch_test, on_a_manual_clock_wait_ends_on_the_records_or_at_once_past_its_deadline) {
  auto& clk = manual_;
  auto& f = fetcher(1 << 20, "", 0, 8, clk);
  auto t = f.want(0, 5);
  // The manual clock does not move: only the records landing end this wait.
  EXPECT_TRUE(f.wait(t, clk.now() + 1h));
  EXPECT_TRUE(f.wait(t, clk.now()));  // in: at once, whatever the deadline
  nn::dataset d;
  auto r = f.take(t, d);
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(d.rows, 5u);
  {
    std::lock_guard lk(channel_->mu);
    channel_->records_silent = true;
  }
  auto u = f.want(20, 5);
  EXPECT_FALSE(f.wait(u, clk.now()));  // not in, and the deadline has come: at once
}

}  // namespace
}  // namespace troupe::actors
