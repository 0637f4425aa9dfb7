// The front end's scheduling core (serve/src/core.hpp, batcher.hpp, dispatcher.hpp) on a fake
// replica link and a manual clock: batches of whole requests, the delay and size bounds, the
// bounded queue, retries when a replica dies or hangs, generations and draining.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "../../serve/src/access_log.hpp"
#include "../../serve/src/core.hpp"
#include "../../serve/src/serve_metrics.hpp"

namespace troupe::serve {
namespace {

using namespace std::chrono_literals;

struct sent_batch {
  std::string node;
  std::uint64_t id;
  std::vector<std::uint64_t> requests;
  std::size_t rows;
  std::vector<float> dense;  // every request's, in order
};

class fake_link : public replica_link {
 public:
  bool send_batch(const std::string& node, std::uint64_t batch_id, const std::vector<request_ptr>& requests,
                  std::size_t rows) override {
    if (unreachable.count(node)) return false;
    sent_batch b{node, batch_id, {}, rows, {}};
    for (const auto& r : requests) {
      b.requests.push_back(r->id);
      b.dense.insert(b.dense.end(), r->dense.begin(), r->dense.end());
    }
    sent.push_back(b);
    return true;
  }
  std::vector<sent_batch> sent;
  std::set<std::string> unreachable;
};

class core_test : public ::testing::Test {
 protected:
  void make(std::size_t max_batch = 4, std::chrono::microseconds delay = 0us, std::size_t queue = 16,
            std::size_t pipeline = 1) {
    core_options o;
    o.limits = {max_batch, delay, queue};
    o.pipeline = pipeline;
    o.replica_timeout = 1s;
    o.max_attempts = 2;
    core = std::make_unique<serving_core>(o, link, metrics, clk);
    core->activate(1);
  }
  request_ptr req(std::size_t rows) {
    auto r = std::make_shared<request>();
    r->id = next++;
    r->rows = rows;
    r->dense.assign(rows, static_cast<float>(r->id));
    r->arrived = clk.now();
    r->deadline = clk.now() + 5s;
    auto id = r->id;
    r->done = [this, id](outcome&& o) { answers[id] = std::move(o); };
    return r;
  }
  void up(const std::string& node, std::uint32_t gen = 1, std::uint64_t inc = 0) {
    core->add_replica(node, inc, gen, 0);
    std::string version = "v";
    version += std::to_string(gen);
    ASSERT_TRUE(core->replica_ready(node, inc, version, "cpu", 1));
  }
  // Answers a sent batch with logits = the request's id per row.
  void answer(const sent_batch& b, const std::string& version = "v1") {
    std::vector<float> logits;
    for (auto id : b.requests)
      for (std::size_t k = 0; k < rows_of[id]; ++k) logits.push_back(static_cast<float>(id));
    core->result(b.id, logits.data(), b.rows, 1, "", version, 100);
  }
  failure submit(std::size_t rows) {
    auto r = req(rows);
    rows_of[r->id] = rows;
    return core->submit(r);
  }

  manual_clock clk;
  observe::registry reg;
  serve_metrics metrics{reg, "m"};
  fake_link link;
  std::unique_ptr<serving_core> core;
  std::uint64_t next = 1;
  std::map<std::uint64_t, std::size_t> rows_of;
  std::map<std::uint64_t, outcome> answers;
};

TEST_F(core_test, batches_are_whole_requests_up_to_max_batch) {
  make(4, 0us, 32, 1);
  // No replica yet: everything waits.
  for (std::size_t rows : {1, 2, 2, 3, 1}) ASSERT_EQ(submit(rows), failure::none);
  EXPECT_TRUE(link.sent.empty());
  up("replica-1-0");
  // The first batch takes 1 + 2 (a third request of 2 would make 5 > 4): never split.
  ASSERT_EQ(link.sent.size(), 1u);
  EXPECT_EQ(link.sent[0].requests, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(link.sent[0].rows, 3u);
  answer(link.sent[0]);
  ASSERT_EQ(link.sent.size(), 2u);
  EXPECT_EQ(link.sent[1].requests, (std::vector<std::uint64_t>{3}));
  answer(link.sent[1]);
  ASSERT_EQ(link.sent.size(), 3u);
  EXPECT_EQ(link.sent[2].requests, (std::vector<std::uint64_t>{4, 5}));
  answer(link.sent[2]);
  ASSERT_EQ(answers.size(), 5u);
  for (auto& [id, o] : answers) {
    EXPECT_EQ(o.why, failure::none);
    ASSERT_EQ(o.logits.size(), rows_of[id]);
    for (float v : o.logits) EXPECT_EQ(v, static_cast<float>(id));  // its own rows, no one else's
    EXPECT_EQ(o.version, "v1");
  }
}

TEST_F(core_test, a_batch_waits_for_max_delay_unless_full) {
  make(4, 500us, 32, 1);
  up("replica-1-0");
  ASSERT_EQ(submit(1), failure::none);
  EXPECT_TRUE(link.sent.empty());  // waits for company
  auto t = core->tick();
  ASSERT_TRUE(t.next);
  EXPECT_EQ(*t.next, clk.now() + 500us);
  clk.advance(200us);
  ASSERT_EQ(submit(2), failure::none);
  EXPECT_TRUE(link.sent.empty());
  clk.advance(300us);
  core->tick();
  ASSERT_EQ(link.sent.size(), 1u);
  EXPECT_EQ(link.sent[0].rows, 3u);
  answer(link.sent[0]);
  // Full before the delay: goes at once.
  ASSERT_EQ(submit(2), failure::none);
  ASSERT_EQ(submit(2), failure::none);
  ASSERT_EQ(link.sent.size(), 2u);
  EXPECT_EQ(link.sent[1].rows, 4u);
}

TEST_F(core_test, the_queue_is_bounded) {
  make(4, 0us, 6, 1);
  EXPECT_EQ(submit(4), failure::none);
  EXPECT_EQ(submit(2), failure::none);
  EXPECT_EQ(submit(1), failure::queue_full);
  EXPECT_EQ(core->stats().queued_rows, 6u);
  up("replica-1-0");
  EXPECT_EQ(submit(1), failure::none);  // room again once a batch left
}

TEST_F(core_test, a_dead_replicas_batches_go_to_another) {
  make(4, 0us, 32, 1);
  up("replica-1-0");
  up("replica-1-1");
  ASSERT_EQ(submit(2), failure::none);
  ASSERT_EQ(submit(2), failure::none);
  ASSERT_EQ(link.sent.size(), 2u);
  std::string dead = link.sent[0].node, alive = link.sent[1].node;
  EXPECT_NE(dead, alive);
  core->replica_gone(dead, 0);
  EXPECT_TRUE(answers.empty());
  answer(link.sent[1]);
  // Request 1 goes again, to the survivor, in a batch of its own id.
  ASSERT_EQ(link.sent.size(), 3u);
  EXPECT_EQ(link.sent[2].node, alive);
  EXPECT_EQ(link.sent[2].requests, (std::vector<std::uint64_t>{link.sent[0].requests}));
  // A late answer from the dead one's batch is dropped: each request is answered once.
  answer(link.sent[0], "late");
  answer(link.sent[2]);
  ASSERT_EQ(answers.size(), 2u);
  for (auto& [id, o] : answers) EXPECT_EQ(o.version, "v1");
  EXPECT_EQ(metrics.retried_batches.value(), 1);
}

TEST_F(core_test, a_request_fails_after_max_attempts_replicas_died_on_it) {
  make(4, 0us, 32, 1);
  up("replica-1-0");
  ASSERT_EQ(submit(1), failure::none);
  core->replica_gone("replica-1-0", 0);
  up("replica-1-0", 1, 1);
  ASSERT_EQ(link.sent.size(), 2u);
  core->replica_gone("replica-1-0", 1);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers.begin()->second.why, failure::replicas_failed);
  EXPECT_NE(answers.begin()->second.message.find("sent to 2 replicas"), std::string::npos);
}

TEST_F(core_test, a_stale_incarnations_death_leaves_the_new_one) {
  make(4, 0us, 32, 1);
  up("replica-1-0", 1, 3);
  core->replica_gone("replica-1-0", 2);  // the previous incarnation's connection, late
  ASSERT_EQ(submit(1), failure::none);
  EXPECT_EQ(link.sent.size(), 1u);
}

TEST_F(core_test, a_hung_replica_is_fenced_and_its_batch_sent_again) {
  make(4, 0us, 32, 1);
  up("replica-1-0");
  up("replica-1-1");
  ASSERT_EQ(submit(1), failure::none);
  ASSERT_EQ(link.sent.size(), 1u);
  std::string hung = link.sent[0].node;
  clk.advance(1500ms);
  auto t = core->tick();
  ASSERT_EQ(t.fence.size(), 1u);
  EXPECT_EQ(t.fence[0].node, hung);
  ASSERT_EQ(link.sent.size(), 2u);
  EXPECT_NE(link.sent[1].node, hung);  // the hung one keeps its slot taken
}

TEST_F(core_test, an_unreachable_replica_is_counted_out_and_fenced) {
  make(4, 0us, 32, 1);
  up("replica-1-0");
  up("replica-1-1");
  link.unreachable.insert("replica-1-0");
  link.unreachable.insert("replica-1-1");
  ASSERT_EQ(submit(1), failure::none);
  // Tried on one, then the other (never twice on the same), then failed: max_attempts is 2 here.
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[1].why, failure::replicas_failed);
  auto t = core->tick();
  EXPECT_EQ(t.fence.size(), 2u);
}

TEST_F(core_test, swap_moves_new_batches_and_drains_the_old_generation) {
  make(4, 0us, 32, 2);
  up("replica-1-0", 1);
  core->activate(1);
  ASSERT_EQ(submit(1), failure::none);
  ASSERT_EQ(link.sent.size(), 1u);
  // Generation 2 loads beside it; traffic stays on 1 until activated.
  up("replica-2-0", 2);
  ASSERT_EQ(submit(1), failure::none);
  ASSERT_EQ(link.sent.size(), 2u);
  EXPECT_EQ(link.sent[1].node, "replica-1-0");
  core->activate(2);
  ASSERT_EQ(submit(1), failure::none);
  ASSERT_EQ(link.sent.size(), 3u);
  EXPECT_EQ(link.sent[2].node, "replica-2-0");
  // The old replica is stopped only once its batches are answered.
  EXPECT_TRUE(core->tick().stop.empty());
  answer(link.sent[0], "v1");
  EXPECT_TRUE(core->tick().stop.empty());
  answer(link.sent[1], "v1");
  auto t = core->tick();
  EXPECT_EQ(t.stop, (std::vector<std::string>{"replica-1-0"}));
  EXPECT_TRUE(core->tick().stop.empty());  // once
  answer(link.sent[2], "v2");
  EXPECT_EQ(answers[1].version, "v1");
  EXPECT_EQ(answers[3].version, "v2");
}

// Raw rows encoded by generation 1's encoder and still queued when generation 2 takes the traffic are
// encoded again by 2's before they go (they went as they were: the old version's standardization fed
// the new model, a 200 with a wrong answer); rows 2's encoder refuses are answered 400; inputs as
// sent (generation 0) go as they are.
TEST_F(core_test, raw_rows_queued_across_a_swap_are_encoded_by_the_generation_they_go_to) {
  make(4, 500us, 32, 1);
  up("replica-1-0", 1);
  std::vector<std::uint32_t> asked;
  auto raw = [&](bool refused) {
    auto r = req(1);
    rows_of[r->id] = 1;
    r->generation = 1;
    r->reencode = [&asked, refused](request& q, std::uint32_t g) -> std::string {
      asked.push_back(g);
      if (refused) return "no column 'City'";
      q.dense.assign(1, 100.0f * static_cast<float>(g));
      q.generation = g;
      return "";
    };
    return r;
  };
  auto kept = raw(false), refused = raw(true);
  ASSERT_EQ(core->submit(kept), failure::none);
  ASSERT_EQ(core->submit(refused), failure::none);
  ASSERT_EQ(submit(1), failure::none);  // tensors as sent
  EXPECT_TRUE(link.sent.empty());
  up("replica-2-0", 2);
  core->activate(2);
  clk.advance(500us);
  core->tick();
  ASSERT_EQ(link.sent.size(), 1u);
  EXPECT_EQ(link.sent[0].node, "replica-2-0");
  EXPECT_EQ(link.sent[0].requests, (std::vector<std::uint64_t>{kept->id, 3}));
  EXPECT_EQ(link.sent[0].dense, (std::vector<float>{200.0f, 3.0f})) << "encoded again by generation 2's";
  EXPECT_EQ(kept->dense, std::vector<float>{static_cast<float>(kept->id)})
      << "a copy: the original untouched";
  EXPECT_EQ(asked, (std::vector<std::uint32_t>{2, 2}));
  ASSERT_TRUE(answers.count(refused->id));
  EXPECT_EQ(answers[refused->id].why, failure::bad_rows);
  EXPECT_EQ(answers[refused->id].message, "no column 'City'");
  answer(link.sent[0], "v2");
  EXPECT_EQ(answers[kept->id].version, "v2");
}

TEST_F(core_test, queued_requests_time_out_and_shutdown_answers_the_rest) {
  make(4, 0us, 32, 1);
  ASSERT_EQ(submit(1), failure::none);
  clk.advance(3s);
  ASSERT_EQ(submit(1), failure::none);
  clk.advance(2500ms);
  core->tick();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[1].why, failure::timed_out);
  core->shutdown();
  EXPECT_EQ(answers[2].why, failure::shutting_down);
  EXPECT_EQ(submit(1), failure::shutting_down);
}

TEST_F(core_test, a_forward_error_fails_the_batchs_requests_only) {
  make(4, 0us, 32, 1);
  up("replica-1-0");
  ASSERT_EQ(submit(1), failure::none);
  core->result(link.sent[0].id, nullptr, 1, 1, "forward failed on 1 rows: boom", "v1", 5);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[1].why, failure::model_failed);
  EXPECT_EQ(answers[1].message, "forward failed on 1 rows: boom");
  ASSERT_EQ(submit(1), failure::none);
  answer(link.sent[1]);
  EXPECT_EQ(answers[2].why, failure::none);
}

// One request the model fails on (a value it raises on) fails alone: the failed batch's requests
// go again, each in a batch of its own, and the others are answered (they all failed with it).
TEST_F(core_test, a_batch_the_model_failed_on_is_retried_request_by_request) {
  make(4, 0us, 32, 1);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(submit(1), failure::none);
  up("replica-1-0");
  ASSERT_EQ(link.sent.size(), 1u);
  ASSERT_EQ(link.sent[0].requests.size(), 3u);
  core->result(link.sent[0].id, nullptr, 3, 1, "forward failed on 3 rows: a value over 1000", "v1", 5);
  EXPECT_TRUE(answers.empty());
  ASSERT_EQ(submit(1), failure::none);  // a new request is not batched with the ones sent alone
  for (std::size_t i = 1; i <= 3; ++i) {
    ASSERT_EQ(link.sent.size(), i + 1);
    ASSERT_EQ(link.sent[i].requests.size(), 1u);
    if (link.sent[i].requests[0] == 2)
      core->result(link.sent[i].id, nullptr, 1, 1, "forward failed on 1 rows: a value over 1000", "v1", 5);
    else
      answer(link.sent[i]);
  }
  ASSERT_EQ(link.sent.size(), 5u);
  EXPECT_EQ(link.sent[4].requests, (std::vector<std::uint64_t>{4}));
  answer(link.sent[4]);
  ASSERT_EQ(answers.size(), 4u);
  for (auto& [id, o] : answers)
    EXPECT_EQ(o.why, id == 2 ? failure::model_failed : failure::none) << "request " << id;
  EXPECT_EQ(answers[2].message, "forward failed on 1 rows: a value over 1000");
}

TEST_F(core_test, equally_loaded_replicas_take_turns) {
  make(1, 0us, 32, 4);
  up("replica-1-0");
  up("replica-1-1");
  up("replica-1-2");
  for (int i = 0; i < 6; ++i) ASSERT_EQ(submit(1), failure::none);
  std::map<std::string, int> per;
  for (auto& b : link.sent) ++per[b.node];
  EXPECT_EQ(per, (std::map<std::string, int>{{"replica-1-0", 2}, {"replica-1-1", 2}, {"replica-1-2", 2}}));
}

// Each model version answered adds its rows series; a server swapping to new versions for weeks
// (--watch) grew /metrics by two series a version. The latest kept_versions are kept; an older one's
// series go, and a late rate for it does not bring them back.
TEST(serve_metrics, only_the_latest_versions_keep_their_series) {
  observe::registry reg;
  serve_metrics m{reg, "m"};
  // Strings appended piece by piece: "literal" + std::to_string trips g++ 12's -Wrestrict (a false one).
  for (int v = 1; v <= 6; ++v) m.count_rows(std::string("v").append(std::to_string(v)), 10);
  m.count_rows("v6", 5);
  const auto text = reg.render();
  auto series = [](const char* name, int v) {
    std::string s(name);
    s += "{model=\"m\",version=\"v";
    s += std::to_string(v);
    s += "\"}";
    return s;
  };
  for (int v = 1; v <= 6; ++v) {
    const bool kept = v > 6 - static_cast<int>(serve_metrics::kept_versions);
    EXPECT_EQ(text.find(series("troupe_serve_rows_total", v)) != std::string::npos, kept) << v << "\n"
                                                                                          << text;
    EXPECT_EQ(text.find(series("troupe_serve_rows_per_second", v)) != std::string::npos, kept) << v;
  }
  EXPECT_NE(text.find("troupe_serve_rows_total{model=\"m\",version=\"v6\"} 15"), std::string::npos) << text;
  EXPECT_EQ(m.rows_by_version().size(), serve_metrics::kept_versions);
  m.set_rate("v1", 3);
  EXPECT_EQ(reg.render().find("version=\"v1\""), std::string::npos) << "not brought back";
  m.count_rows("v1", 2);  // answers again (a rollback): anew, and the oldest kept one goes
  const auto again = reg.render();
  EXPECT_NE(again.find("troupe_serve_rows_total{model=\"m\",version=\"v1\"} 2"), std::string::npos) << again;
  EXPECT_EQ(again.find("version=\"v3\""), std::string::npos) << again;
}

// [serve] access_log's line: UTC time, the client, the request quoted with its quotes, spaces and
// control bytes escaped (one line, fields split on blanks), status, bytes, time, the X-Request-ID.
TEST(access_log, a_line_per_request_escapes_what_the_client_sent) {
  observe::http_access a{"127.0.0.1:5000",
                         "POST",
                         "/v2/models/m/infer?x=\"a b\"\n",
                         "req 7",
                         200,
                         312,
                         std::chrono::microseconds(412)};
  EXPECT_EQ(
      access_log::line(a, 1796121000123),
      "2026-12-01T10:30:00.123Z 127.0.0.1:5000 \"POST /v2/models/m/infer?x=%22a%20b%22%0A\" 200 312 0.412ms "
      "id=req%207");
  observe::http_access refused{"10.0.0.2:1", "", "", "", 431, 40, {}};
  EXPECT_EQ(access_log::line(refused, 1796121000000),
            "2026-12-01T10:30:00.000Z 10.0.0.2:1 \"-\" 431 40 0.000ms");
}

}  // namespace
}  // namespace troupe::serve
