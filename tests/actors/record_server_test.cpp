// The record server (record_server) on a fake node: ranges served as the store holds them (and
// verified by the receiver's job::decode_rows), replies bounded in size, bad ranges refused with a clear
// error, a corrupt record caught by the receiver. No sockets, no actor system.
#include <gtest/gtest.h>

#include <limits>

#include "fake_node.hpp"
#include "master/record_server.hpp"
#include "troupe/job/data.hpp"

namespace troupe::actors {
namespace {

using testing::fake_node;
using testing::incoming;

class record_server_test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("record-server-test");
    ASSERT_TRUE(job::write_dataset(testing::tiny_dataset(), dir_ + "/train", "test"));
    node_.emplace(node_identity{node_id{"master", 1}, cluster::node_role::master, 0, dir_, "job", "job", 0});
    auto store = storage::record_store::open(dir_ + "/train");
    ASSERT_TRUE(store);
    manifest_ = store->info();
    size_ = storage::encoded_size(manifest_.schema);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The server's reply to a RecordRequest for [first, first + count) of the training store.
  schema::RecordReply::Reader ask(record_server& s, std::uint64_t first, std::uint64_t count,
                                  bool test = false) {
    s.on_message(incoming(
        node_id{"worker-0", 1}, "records-rpc", "records",
        [&](auto body) {
          auto q = body.initRecordRequest();
          q.setTest(test);
          q.setFirstRecord(first);
          q.setRecordCount(count);
        },
        7));
    auto out = node_->take();
    EXPECT_EQ(out.size(), 1u);
    last_ = out.at(0).m;
    EXPECT_EQ(out.at(0).node, "worker-0");
    EXPECT_EQ(out.at(0).to, "records-rpc");
    EXPECT_EQ(last_.correlation_id(), 7u);
    return last_.body().getRecordReply();
  }
  static std::string_view bytes_of(schema::RecordReply::Reader r) {
    auto d = r.getRecords();
    return {reinterpret_cast<const char*>(d.begin()), d.size()};
  }

  std::string dir_;
  std::optional<fake_node> node_;
  storage::manifest manifest_;
  std::size_t size_ = 0;
  message last_;
};

TEST_F(record_server_test, serves_a_range_as_stored_and_it_decodes_to_the_rows) {
  record_server s(*node_, data_paths{dir_ + "/train", dir_ + "/none"});
  auto r = ask(s, 5, 10);
  ASSERT_EQ(r.which(), schema::RecordReply::RECORDS) << r.getError().cStr();
  EXPECT_EQ(r.getFirstRecord(), 5u);
  EXPECT_EQ(r.getRecordCount(), 10u);
  ASSERT_EQ(r.getRecords().size(), 10 * size_);
  auto m = storage::manifest::parse(r.getManifest().cStr(), "reply");
  ASSERT_TRUE(m) << m.err().to_string();
  EXPECT_EQ(m->schema, manifest_.schema);
  EXPECT_EQ(m->record_count, 40u);
  nn::dataset d;
  job::size_rows(*m, "served", 10, d);
  ASSERT_TRUE(job::decode_rows(m->schema, 5, bytes_of(r), d, 0, "served"));
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(d.dense_row(i)[0], static_cast<float>(5 + i));
    EXPECT_EQ(d.labels[i], static_cast<float>((5 + i) % 2));
  }
}

TEST_F(record_server_test, large_records_go_out_of_the_map_uncopied_one_segment_each) {
  nn::dataset big;  // records of 4 + 4 + 4 * 600 = 2408 bytes: uncopied
  big.info.name = "big";
  big.info.dense_dim = 600;
  big.info.num_classes = 2;
  big.rows = 30;
  for (std::size_t i = 0; i < big.rows; ++i) {
    for (std::size_t k = 0; k < 600; ++k) big.dense.push_back(static_cast<float>(i * 1000 + k));
    big.labels.push_back(static_cast<float>(i % 2));
  }
  ASSERT_TRUE(job::write_dataset(big, dir_ + "/big", "big"));
  auto m = storage::manifest::parse(storage::record_store::open(dir_ + "/big")->info().to_toml(), "big");
  ASSERT_TRUE(m);
  const std::size_t size = storage::encoded_size(m->schema);
  ASSERT_GE(size, record_server::min_uncopied_record_bytes);
  record_server s(*node_, data_paths{dir_ + "/big", dir_ + "/none"}, 20 * size);  // 20 records a reply
  auto request = incoming(
      node_id{"worker-0", 1}, "records-rpc", "records",
      [&](auto body) {
        auto q = body.initRecordRequest();
        q.setFirstRecord(4);
        q.setRecordCount(25);
      },
      9);
  outbound o = s.answer(request);
  EXPECT_GT(o.builder().getSegmentsForOutput().size(), 20u) << "each record a segment of its own: no copy";
  auto reply = loopback_message(o, node_id{"master", 1});
  ASSERT_TRUE(reply) << reply.err().to_string();
  auto r = reply->body().getRecordReply();
  ASSERT_EQ(r.which(), schema::RecordReply::RECORD_LIST) << (r.isError() ? r.getError().cStr() : "");
  EXPECT_EQ(r.getRecordCount(), 20u) << "bounded: the requester asks for the rest";
  ASSERT_EQ(r.getRecordList().size(), 20u);
  nn::dataset d;
  job::size_rows(*m, "served", 20, d);
  for (unsigned k = 0; k < 20; ++k) {
    auto e = r.getRecordList()[k];
    ASSERT_EQ(e.size(), size);
    ASSERT_TRUE(job::decode_rows(m->schema, 4 + k, {reinterpret_cast<const char*>(e.begin()), e.size()}, d, k,
                                 "served"));
    EXPECT_EQ(d.dense_row(k)[0], static_cast<float>((4 + k) * 1000));
    EXPECT_EQ(d.dense_row(k)[599], static_cast<float>((4 + k) * 1000 + 599));
  }
  // The records stay valid after the server is gone: the reply holds its read transaction.
  std::optional<record_server> gone(std::in_place, *node_, data_paths{dir_ + "/big", dir_ + "/none"});
  outbound later = gone->answer(request);
  gone.reset();
  auto kept = loopback_message(later, node_id{"master", 1});
  ASSERT_TRUE(kept);
  auto e = kept->body().getRecordReply().getRecordList()[3];
  ASSERT_TRUE(
      job::decode_rows(m->schema, 7, {reinterpret_cast<const char*>(e.begin()), e.size()}, d, 0, "served"));
  EXPECT_EQ(d.dense_row(0)[1], 7001.0f);
}

TEST_F(record_server_test, a_reply_is_bounded_and_the_requester_asks_for_the_rest) {
  record_server s(*node_, data_paths{dir_ + "/train", ""}, 3 * size_ + 1);
  std::uint64_t got = 0;
  while (got < 40) {
    auto r = ask(s, got, 40 - got);
    ASSERT_EQ(r.which(), schema::RecordReply::RECORDS) << r.getError().cStr();
    EXPECT_EQ(r.getRecordCount(), std::min<std::uint64_t>(3, 40 - got));
    EXPECT_EQ(r.getRecords().size(), r.getRecordCount() * size_);
    got += r.getRecordCount();
  }
  // A bound below one record still sends one: the requester always makes progress.
  record_server tiny(*node_, data_paths{dir_ + "/train", ""}, 1);
  EXPECT_EQ(ask(tiny, 0, 40).getRecordCount(), 1u);
}

TEST_F(record_server_test, ranges_outside_the_store_are_refused_naming_the_range_and_the_store) {
  record_server s(*node_, data_paths{dir_ + "/train", ""});
  const auto max = std::numeric_limits<std::uint64_t>::max();
  for (auto [first, count] :
       {std::pair<std::uint64_t, std::uint64_t>{35, 10}, {41, 1}, {0, max}, {max, max}}) {
    auto r = ask(s, first, count);
    ASSERT_EQ(r.which(), schema::RecordReply::ERROR) << first << "+" << count;
    std::string e = r.getError().cStr();
    EXPECT_NE(e.find("[" + std::to_string(first) + ", "), std::string::npos) << e;
    EXPECT_NE(e.find("outside the store of 40 records"), std::string::npos) << e;
    EXPECT_NE(e.find(dir_ + "/train"), std::string::npos) << e;
  }
  // The last record and the empty range at the end are fine.
  EXPECT_EQ(ask(s, 39, 1).getRecordCount(), 1u);
  EXPECT_EQ(ask(s, 40, 0).which(), schema::RecordReply::RECORDS);
}

TEST_F(record_server_test, count_zero_is_the_manifest_and_a_missing_test_store_is_an_error_reply) {
  record_server s(*node_, data_paths{dir_ + "/train", dir_ + "/no-test"});
  auto r = ask(s, 0, 0);
  ASSERT_EQ(r.which(), schema::RecordReply::RECORDS);
  EXPECT_EQ(r.getRecords().size(), 0u);
  EXPECT_TRUE(storage::manifest::parse(r.getManifest().cStr(), "reply"));
  auto t = ask(s, 0, 0, true);
  ASSERT_EQ(t.which(), schema::RecordReply::ERROR);
  EXPECT_NE(std::string(t.getError().cStr()).find(dir_ + "/no-test"), std::string::npos)
      << t.getError().cStr();
}

TEST_F(record_server_test, other_kinds_are_ignored_and_a_missing_training_store_throws) {
  record_server s(*node_, data_paths{dir_ + "/train", ""});
  s.on_message(
      incoming(node_id{"worker-0", 1}, "worker", "records", [](auto body) { body.initTaskRenew(); }));
  EXPECT_TRUE(node_->take().empty());
  EXPECT_THROW(record_server(*node_, data_paths{dir_ + "/nothing", ""}), std::runtime_error);
}

TEST_F(record_server_test, a_record_corrupted_on_the_way_fails_the_receivers_decode_naming_it) {
  record_server s(*node_, data_paths{dir_ + "/train", ""});
  auto r = ask(s, 10, 5);
  std::string bytes(bytes_of(r));
  bytes[2 * size_ + 6] ^= 0x10;  // record 12's label
  nn::dataset d;
  job::size_rows(manifest_, "served", 5, d);
  auto dec = job::decode_rows(manifest_.schema, 10, bytes, d, 0, "served from master");
  ASSERT_FALSE(dec);
  EXPECT_EQ(dec.err(), storage::storage_errc::corrupt_record);
  EXPECT_NE(dec.err().to_string().find("12"), std::string::npos) << dec.err().to_string();
  // Bytes that are not whole records, or more records than rows, are refused too.
  EXPECT_FALSE(job::decode_rows(manifest_.schema, 10, std::string_view(bytes).substr(1), d, 0, "served"));
  EXPECT_FALSE(job::decode_rows(manifest_.schema, 10, bytes, d, 1, "served"));
}

}  // namespace
}  // namespace troupe::actors
