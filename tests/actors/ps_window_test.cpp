// ps_window, a worker's requests in flight to its PS shards. On a real shard actor over loopback
// (testing::ps_shard_host, as ps_bench runs it): pushes not waited for are applied in the order
// sent and acknowledged within the window, a request sees every push sent before it (acknowledged
// or not), a pull sent ahead misses exactly the pushes sent after it, a refused push fails a later
// call. On a fake channel and a manual clock: a push that times out, or whose shard went down,
// fails the window and empties it; the worker's leave ends a wait at once.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>

#include <unistd.h>

#include "fake_rpc.hpp"
#include "ps_bench_job.hpp"
#include "troupe/actors/testing/ps_shard_host.hpp"
#include "troupe/core/config.hpp"
#include "troupe/job/data_model.hpp"
#include "troupe/nn/optimizer.hpp"
#include "troupe/wire/messages.hpp"
#include "troupe/wire/raw.hpp"
#include "worker/ps_window.hpp"

namespace troupe::actors {
namespace {

namespace fs = std::filesystem;
using request = wire::rpc_channel::request;

wire::rpc_channel::request push_request(const std::string& node, const std::string& table,
                                        const nn::sparse_grad& g) {
  request r{node, "ps", outbound()};
  auto p = r.out.body().initPsPush();
  p.initDense(0);
  auto sl = p.initSparse(1);
  sl[0].setTable(table);
  sl[0].setDim(static_cast<std::uint32_t>(g.dim));
  sl[0].setIds(kj::arrayPtr(g.ids.data(), g.ids.size()));
  auto v = wire::raw<float>(sl[0].initValues(static_cast<unsigned>(g.rows.size())));
  std::copy(g.rows.begin(), g.rows.end(), v.begin());
  return r;
}

request pull_request(const std::string& node, const std::string& table,
                     const std::vector<std::uint64_t>& ids) {
  request r{node, "ps", outbound()};
  auto p = r.out.body().initPsPull();
  p.initDense(0);
  auto refs = p.initSparse(1);
  refs[0].setTable(table);
  refs[0].setIds(kj::arrayPtr(ids.data(), ids.size()));
  return r;
}

// A gradient for `ids`, different each `seed`.
nn::sparse_grad grad(const std::vector<std::uint64_t>& ids, int seed) {
  nn::sparse_grad g;
  g.dim = 16;
  g.ids = ids;
  for (std::size_t i = 0; i < ids.size() * 16; ++i)
    g.rows.push_back(0.01F * static_cast<float>((static_cast<int>(i) * 7 + seed * 13) % 11 - 5));
  return g;
}

class ps_window_shard : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = fs::temp_directory_path() / ("troupe-ps-window-test-" + std::to_string(::getpid()));
    fs::remove_all(work_);
    auto doc = config_doc::from_string(bench::ps_bench_job, "ps_window_test job");
    ASSERT_TRUE(doc);
    auto spec = job::job_spec::read(*doc);
    ASSERT_TRUE(spec);
    spec_ = *spec;
    auto data = job::prepare_datasets(spec_.nn.data, (work_ / "datasets").string());
    ASSERT_TRUE(data) << data.err().to_string();
    data_ = *data;
    auto store = storage::record_store::open(data_.train_dir);
    ASSERT_TRUE(store);
    auto model = job::build_model(spec_, *store);
    ASSERT_TRUE(model);
    model_ = std::move(*model);
    for (auto* t : model_->embedding_tables())
      if (t->dim() == 16) table_ = t;
    ASSERT_NE(table_, nullptr);
    auto opt = nn::make_optimizer(spec_.nn.train.optimizer);
    ASSERT_TRUE(opt);
    opt_ = std::move(*opt);
    slots_ = std::make_unique<nn::row_slots>(16, *opt_);
    auto h = testing::ps_shard_host::start(spec_, data_, (work_ / "shard").string(), "127.0.0.1", 0);
    ASSERT_TRUE(h) << h.err().to_string();
    shard_ = std::move(*h);
    transport_config cfg = spec_.transport;
    cfg.token = "ps-bench";
    auto net = endpoint::create(node_id{"worker-0", 1}, cfg);
    ASSERT_TRUE(net);
    net_ = std::move(*net);
    auto peer = net_->connect(shard_->bound(), false);
    ASSERT_TRUE(peer) << peer.err().to_string();
    node_ = peer->name;
    auto rpc = wire::rpc_client::create(*net_, "ps-rpc");
    ASSERT_TRUE(rpc);
    rpc_ = std::move(*rpc);
  }
  void TearDown() override {
    rpc_.reset();
    net_.reset();
    shard_.reset();
    fs::remove_all(work_);
  }

  // Sends push `g` into the window, and applies it here as the shard does.
  expected<void> push(ps_window& w, const nn::sparse_grad& g) {
    nn::apply_sparse(*opt_, *table_, g, *slots_);
    std::vector<request> reqs;
    reqs.push_back(push_request(node_, table_->name(), g));
    auto sent = w.send(reqs, std::chrono::seconds(10));
    if (!sent) return sent.err();
    return w.add_push(std::move(*sent));
  }
  expected<ps_window::group> send_pull(ps_window& w, const std::vector<std::uint64_t>& ids) {
    std::vector<request> reqs;
    reqs.push_back(pull_request(node_, table_->name(), ids));
    return w.send(reqs, std::chrono::seconds(10));
  }
  std::vector<float> rows_of(ps_window& w, const ps_window::group& g) {
    auto replies = w.await(g);
    EXPECT_TRUE(replies) << replies.err().to_string();
    if (!replies) return {};
    std::vector<float> rows;
    wire::to_vector((*replies)[0].body().getPsPullReply().getSparse()[0].getValues(), rows);
    return rows;
  }
  std::vector<float> local_rows(const std::vector<std::uint64_t>& ids) {
    std::vector<float> rows(ids.size() * 16);
    table_->read_rows(ids, rows.data());
    return rows;
  }

  fs::path work_;
  job::job_spec spec_;
  job::prepared_data data_;
  std::unique_ptr<nn::model> model_;
  nn::embedding_table* table_ = nullptr;
  std::unique_ptr<nn::optimizer> opt_;
  std::unique_ptr<nn::row_slots> slots_;
  std::unique_ptr<testing::ps_shard_host> shard_;
  std::unique_ptr<endpoint> net_;
  std::string node_;
  std::unique_ptr<wire::rpc_client> rpc_;
};

TEST_F(ps_window_shard, pushes_not_waited_for_are_applied_in_order_and_acknowledged_within_the_window) {
  ps_window w(*rpc_, 3, [] { return false; });
  const std::vector<std::uint64_t> ids = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89};
  // Rows created on the shard before the pushes (a push to a row never pulled creates it the same).
  ASSERT_EQ(rows_of(w, *send_pull(w, ids)), local_rows(ids));
  for (int k = 0; k < 12; ++k) {
    ASSERT_TRUE(push(w, grad(ids, k)));
    EXPECT_LE(w.unacknowledged(), 3u);
  }
  // A pull sent now sees all twelve pushes, the unacknowledged ones too: Adam's steps in order.
  auto g = send_pull(w, ids);
  ASSERT_TRUE(g);
  EXPECT_EQ(rows_of(w, *g), local_rows(ids));
  ASSERT_TRUE(w.settle());
  EXPECT_EQ(w.unacknowledged(), 0u);
}

TEST_F(ps_window_shard, a_pull_sent_ahead_misses_only_the_pushes_sent_after_it) {
  ps_window w(*rpc_, 2, [] { return false; });
  const std::vector<std::uint64_t> ids = {100, 200, 300, 400};
  ASSERT_TRUE(push(w, grad(ids, 1)));
  auto ahead = send_pull(w, ids);  // the prefetch of the next batch
  ASSERT_TRUE(ahead);
  const auto before = local_rows(ids);
  ASSERT_TRUE(push(w, grad(ids, 2)));  // the push of the batch trained meanwhile
  EXPECT_EQ(rows_of(w, *ahead), before);
  EXPECT_NE(before, local_rows(ids));
  EXPECT_EQ(rows_of(w, *send_pull(w, ids)), local_rows(ids));
}

TEST_F(ps_window_shard, a_refused_push_fails_a_later_call_and_empties_the_window) {
  ps_window w(*rpc_, 4, [] { return false; });
  std::vector<request> reqs;
  reqs.push_back(push_request(node_, "no-such-table", grad({7}, 0)));
  auto bad = w.send(reqs, std::chrono::seconds(10));
  ASSERT_TRUE(bad);
  ASSERT_TRUE(w.add_push(*bad));  // not waited for: the window has room
  auto s = w.settle();
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().to_string().find("no-such-table"), std::string::npos) << s.err().to_string();
  EXPECT_EQ(w.unacknowledged(), 0u);
  // The window goes on: the next pushes are applied and acknowledged.
  ASSERT_TRUE(push(w, grad({7, 9}, 3)));
  ASSERT_TRUE(w.settle());
  EXPECT_EQ(rows_of(w, *send_pull(w, {7, 9})), local_rows({7, 9}));
}

// Ids past the data's id space (6 fields x 166667) come from no record: a pull of them would create
// rows (a peer pulling random ids grew a shard without bound), a push would train them. Refused,
// naming the id; the window goes on.
TEST_F(ps_window_shard, ids_outside_the_datas_id_space_are_refused) {
  ps_window w(*rpc_, 2, [] { return false; });
  const std::uint64_t past = 6ULL * 166667;
  auto g = send_pull(w, {5, past + 3});
  ASSERT_TRUE(g);
  auto replies = w.await(*g);
  ASSERT_TRUE(replies) << replies.err().to_string();
  std::string err = (*replies)[0].body().getPsPullReply().getError().cStr();
  EXPECT_NE(err.find("id " + std::to_string(past + 3) + " is outside the data's id space [0, " +
                     std::to_string(past) + ")"),
            std::string::npos)
      << err;
  std::vector<request> reqs;
  reqs.push_back(push_request(node_, table_->name(), grad({past}, 0)));
  auto bad = w.send(reqs, std::chrono::seconds(10));
  ASSERT_TRUE(bad);
  // At add_push when the refusal has arrived by then (a loaded machine failed the test there), else
  // at settle, as below.
  auto added = w.add_push(*bad);
  auto s = added ? w.settle() : added;
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().to_string().find("outside the data's id space"), std::string::npos)
      << s.err().to_string();
  EXPECT_EQ(rows_of(w, *send_pull(w, {5, past - 1})), local_rows({5, past - 1}));
}

// A gradient holding NaN (or an infinity) would make every value it touches one: refused, the rows
// as they were.
TEST_F(ps_window_shard, a_gradient_that_is_not_finite_is_refused_and_changes_nothing) {
  ps_window w(*rpc_, 2, [] { return false; });
  const std::vector<std::uint64_t> ids = {11, 12};
  const auto before = rows_of(w, *send_pull(w, ids));
  auto g = grad(ids, 1);
  g.rows[5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<request> reqs;
  reqs.push_back(push_request(node_, table_->name(), g));
  auto bad = w.send(reqs, std::chrono::seconds(10));
  ASSERT_TRUE(bad);
  // The refusal surfaces where the window collects the reply: at add_push when it has arrived by
  // then (a fast shard: a CI run failed on add_push), else at settle.
  auto added = w.add_push(*bad);
  auto s = added ? w.settle() : added;
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().to_string().find("a value is not finite (NaN or infinite): not applied"),
            std::string::npos)
      << s.err().to_string();
  EXPECT_EQ(rows_of(w, *send_pull(w, ids)), before);
}

// ---- failures on a fake channel and a manual clock ----

class ps_window_fake : public ::testing::Test {
 protected:
  // A push group of one request; its id.
  std::uint64_t push(ps_window& w) {
    std::vector<request> reqs;
    reqs.push_back(push_request("ps-0", "t", grad({1}, 0)));
    auto g = w.send(reqs, std::chrono::milliseconds(1000));
    EXPECT_TRUE(g);
    last_ = (*g)[0];
    return last_;
  }
  void accept(std::uint64_t id) {
    rpc_.answer(id, [](auto b) { b.initPsPushReply().setError(""); });
  }
  manual_clock clock_;
  testing::fake_rpc rpc_{clock_, node_id{"worker-0", 1}};
  std::uint64_t last_ = 0;
};

TEST_F(ps_window_fake, the_oldest_push_is_waited_for_only_when_the_window_is_full) {
  ps_window w(rpc_, 2, [] { return false; });
  auto a = push(w);
  ASSERT_TRUE(w.add_push({a}));
  auto b = push(w);
  ASSERT_TRUE(w.add_push({b}));
  EXPECT_EQ(w.unacknowledged(), 2u);
  EXPECT_EQ(rpc_.waits, 0u);
  accept(a);
  auto c = push(w);
  ASSERT_TRUE(w.add_push({c}));  // a's reply is taken without waiting
  EXPECT_EQ(w.unacknowledged(), 2u);
  EXPECT_EQ(rpc_.waits, 0u);
  accept(b);
  accept(c);
  ASSERT_TRUE(w.settle());
  EXPECT_EQ(w.unacknowledged(), 0u);
}

TEST_F(ps_window_fake, a_push_that_times_out_fails_the_window_and_the_rest_are_forgotten) {
  ps_window w(rpc_, 2, [] { return false; });
  auto a = push(w);
  ASSERT_TRUE(w.add_push({a}));
  auto b = push(w);
  ASSERT_TRUE(w.add_push({b}));
  const auto t0 = clock_.now();
  auto s = w.settle();  // a never answers: its timeout (1 s on the manual clock)
  ASSERT_FALSE(s);
  EXPECT_GE(clock_.now() - t0, std::chrono::milliseconds(1000));
  EXPECT_EQ(w.unacknowledged(), 0u);
  EXPECT_TRUE(rpc_.pending(b));  // forgotten by the window, still polled until it expires
  clock_.advance(std::chrono::seconds(2));
  ASSERT_TRUE(w.collect());
  EXPECT_FALSE(rpc_.pending(b));
}

TEST_F(ps_window_fake, a_shard_gone_fails_at_once_and_the_leave_ends_a_wait) {
  ps_window w(rpc_, 0, [] { return false; });
  auto a = push(w);
  rpc_.fail(a);
  const auto t0 = clock_.now();
  EXPECT_FALSE(w.add_push({a}));  // window 0: waited for, and its shard is down
  EXPECT_EQ(clock_.now(), t0);
  bool leaving = false;
  ps_window v(rpc_, 0, [&] { return leaving; });
  auto b = push(v);
  leaving = true;
  auto r = v.add_push({b});
  ASSERT_FALSE(r);
  EXPECT_LT(clock_.now() - t0, std::chrono::milliseconds(1000));
  EXPECT_NE(r.err().to_string().find("leaving"), std::string::npos);
}

}  // namespace
}  // namespace troupe::actors
