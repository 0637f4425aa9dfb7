// The worker's data feed (data_feed.hpp) both ways, on the same 40-record store: the local store
// reads a task's records at once, the served feed (over an in-process channel to a record_server)
// hands out a ticket and the same rows once they are in, and fails a bad range as that task's
// error; both read the same test set.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>

#include "fake_node.hpp"
#include "master/record_server.hpp"
#include "server_channel.hpp"
#include "troupe/job/data.hpp"
#include "worker/data_feed.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;

class data_feed_test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("data-feed-test");
    ASSERT_TRUE(job::write_dataset(testing::tiny_dataset(), dir_ + "/train", "test"));
    ASSERT_TRUE(job::write_dataset(testing::tiny_dataset(), dir_ + "/test", "test"));
    node_.emplace(node_identity{node_id{"master", 1}, cluster::node_role::master, 0, dir_, "job", "job", 0});
    server_.emplace(*node_, data_paths{dir_ + "/train", dir_ + "/test"});
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<data_feed> local() {
    auto train = storage::record_store::open(dir_ + "/train");
    EXPECT_TRUE(train) << train.err().to_string();
    if (!train) return nullptr;
    return std::make_unique<local_feed>(std::move(*train), dir_ + "/test");
  }
  std::unique_ptr<data_feed> served() {
    auto ch = std::make_unique<testing::server_channel>(*server_, node_id{"worker-0", 1});
    auto f = served_feed::create(std::move(ch), record_fetcher::options{}, troupe::clock::system(), 5s);
    EXPECT_TRUE(f) << f.err().to_string();
    if (!f) return nullptr;
    return std::move(*f);
  }
  // Records [first, first + count) through `feed`, waiting (up to 10 s) for served ones.
  static expected<nn::dataset> read(data_feed& feed, std::uint64_t first, std::uint64_t count) {
    nn::dataset rows;
    auto ticket = feed.fetch(first, count, rows);
    if (!ticket) return ticket.err();
    if (!*ticket) return rows;
    if (!feed.wait(**ticket, troupe::clock::system().now() + 10s))
      return make_unexpected(core_errc::io_error, "test: no records within 10 s");
    auto r = feed.take(**ticket, rows);
    if (!r) return make_unexpected(core_errc::io_error, "test: wait() returned before the records");
    if (!*r) return r->err();
    return rows;
  }

  std::string dir_;
  std::optional<testing::fake_node> node_;
  std::optional<record_server> server_;
};

TEST_F(data_feed_test, the_local_store_reads_a_task_at_once) {
  auto feed = local();
  ASSERT_TRUE(feed);
  EXPECT_FALSE(feed->served());
  EXPECT_EQ(feed->manifest().record_count, 40u);
  EXPECT_EQ(feed->source(), dir_ + "/train");
  nn::dataset rows;
  auto ticket = feed->fetch(3, 5, rows);
  ASSERT_TRUE(ticket) << ticket.err().to_string();
  EXPECT_FALSE(*ticket) << "no ticket: the rows are in";
  ASSERT_EQ(rows.rows, 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(rows.dense_row(i)[0], static_cast<float>(3 + i));
}

TEST_F(data_feed_test, served_records_come_with_a_ticket_and_match_the_local_store) {
  auto feed = served();
  ASSERT_TRUE(feed);
  EXPECT_TRUE(feed->served());
  EXPECT_EQ(feed->manifest().record_count, 40u);
  nn::dataset rows;
  auto ticket = feed->fetch(3, 5, rows);
  ASSERT_TRUE(ticket) << ticket.err().to_string();
  ASSERT_TRUE(*ticket) << "served records are on their way";
  auto served_rows = read(*feed, 10, 20);
  auto local_rows = read(*local(), 10, 20);
  ASSERT_TRUE(served_rows) << served_rows.err().to_string();
  ASSERT_TRUE(local_rows) << local_rows.err().to_string();
  EXPECT_EQ(served_rows->rows, 20u);
  EXPECT_EQ(served_rows->dense, local_rows->dense);
  EXPECT_EQ(served_rows->labels, local_rows->labels);
}

TEST_F(data_feed_test, a_range_past_the_end_fails_its_served_task_not_the_feed) {
  auto feed = served();
  ASSERT_TRUE(feed);
  auto bad = read(*feed, 35, 10);  // past the 40 records: the server refuses it
  EXPECT_FALSE(bad);
  auto good = read(*feed, 0, 4);
  ASSERT_TRUE(good) << good.err().to_string();
  EXPECT_EQ(good->rows, 4u);
  // The local store reads what there is of such a range (job::read_records).
  auto clipped = read(*local(), 35, 10);
  ASSERT_TRUE(clipped) << clipped.err().to_string();
  EXPECT_EQ(clipped->rows, 5u);
}

TEST_F(data_feed_test, both_read_the_same_test_set) {
  auto a = local()->test_set();
  auto b = served()->test_set();
  ASSERT_TRUE(a) << a.err().to_string();
  ASSERT_TRUE(b) << b.err().to_string();
  EXPECT_EQ(a->rows, 40u);
  EXPECT_EQ(a->dense, b->dense);
  EXPECT_EQ(a->labels, b->labels);
}

}  // namespace
}  // namespace troupe::actors
