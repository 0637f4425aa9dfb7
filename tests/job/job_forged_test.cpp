// Forged messages from a peer that holds the job's token (docs/job.md, "What a peer may send"): a
// job-finished message from a node other than the master (it ended a half-trained job as finished,
// and the job could not be resumed), a membership view from a node other than the master (one
// leaving a worker out ended it, one listing it alone wedged it for good), and pulls of ids past the
// data's id space (a shard grew by a row per id), and a progress report of counts no worker has
// (the result said dropped_steps 2^64 - 1), change nothing: the job trains every task once
// and ends as it would have.
#include <gtest/gtest.h>

#include <string>

#include "job_harness.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/cluster/membership.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/wire/job_token.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::testing {
namespace {

using namespace std::chrono_literals;

std::uint64_t done_tasks(const nlohmann::json& s) {
  return s.contains("tasks") ? s["tasks"].value("done", std::uint64_t{0}) : 0;
}

// The transport address of the first member of `role` in a status.
std::string address_of(const nlohmann::json& status, const std::string& role, std::string* node = nullptr) {
  for (const auto& m : status["members"])
    if (m.value("role", "") == role) {
      if (node) *node = m.value("node", "");
      return m.value("address", "");
    }
  return "";
}

TEST(job_forged, a_job_finished_a_view_or_a_pull_from_a_node_not_the_master_changes_nothing) {
  auto r = start_job("forged", ctr_job(2, 200000, 2));
  auto st = wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 2 && j["workers_alive"] == 2; }, 120s);
  ASSERT_TRUE(st);
  auto token = wire::read_job_token(r.job_dir);
  ASSERT_TRUE(token);
  transport_config cfg;
  cfg.token = *token;
  cfg.reconnect_attempts = 0;
  auto net = endpoint::create(node_id{"evil", 7}, cfg);
  ASSERT_TRUE(net) << net.err().to_string();
  auto& e = **net;

  // To the runner: "the job finished", with a result that is no JSON.
  auto nodes = cluster::job_dir::open(r.job_dir)->read_nodes();
  ASSERT_TRUE(nodes);
  auto runner = e.connect(nodes->runner_address, false);
  ASSERT_TRUE(runner) << runner.err().to_string();
  auto fin = wire::job();
  auto f = fin.body.initJobFinished();
  f.setResultJson("{{{{not json");
  f.setOk(true);
  ASSERT_TRUE(e.send(runner->name, "runner", std::move(fin.out), "evil"));

  // To a worker: a view that leaves it out.
  std::string worker;
  auto worker_addr = address_of(*st, "worker", &worker);
  ASSERT_FALSE(worker_addr.empty()) << st->dump();
  auto w = e.connect(worker_addr, false);
  ASSERT_TRUE(w) << w.err().to_string();
  auto view = cluster::membership_view::make({1, 8});
  ASSERT_TRUE(view);
  ASSERT_TRUE(e.send(w->name, "node", wire::membership(*view, "forged", 1, 0), "evil"));

  // To the shard: a pull of an id no record has.
  auto ps = e.connect(address_of(*st, "ps"), false);
  ASSERT_TRUE(ps) << ps.err().to_string();
  outbound pull;
  auto p = pull.body().initPsPull();
  p.initDense(0);
  auto refs = p.initSparse(1);
  refs[0].setTable("embedding");
  std::vector<std::uint64_t> ids = {~std::uint64_t{0} - 1};
  refs[0].setIds(kj::arrayPtr(ids.data(), ids.size()));
  ASSERT_TRUE(e.send(ps->name, "ps", std::move(pull), "evil"));

  // To the master: a progress report of counts no worker has (it made the result's dropped_steps
  // 18446744073709551615 and the loss 1.4e29).
  auto master = e.connect(address_of(*st, "master"), false);
  ASSERT_TRUE(master) << master.err().to_string();
  auto prog = wire::job();
  auto wp = prog.body.initWorkerProgress();
  wp.setSamples(~std::uint64_t{0});
  wp.setSteps(1);
  wp.setDroppedSteps(~std::uint64_t{0});
  wp.setLossSum(1e30);
  ASSERT_TRUE(e.send(master->name, "master", std::move(prog.out), "evil"));

  ASSERT_EQ(wait_job(r, 240s), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("status", ""), "finished") << res.dump();
  EXPECT_EQ(res.value("node_restarts", -1), 0) << res.dump();
  EXPECT_TRUE(res.contains("test_loss")) << "the master's own result: " << res.dump();
  EXPECT_EQ(res.value("dropped_steps", std::uint64_t{1}), 0u) << res.dump();
  EXPECT_LE(res.value("samples_trained", ~std::uint64_t{0}), std::uint64_t{4} * 200000) << res.dump();
  EXPECT_LT(res.value("train_loss", 1e30), 100.0) << res.dump();
  expect_all_done(r);
  for (const auto& [id, attempt] : done_attempts(r)) EXPECT_EQ(attempt, 1u) << "task " << id;
  const auto runner_log = read_file(r.job_dir + "/logs/runner.log");
  EXPECT_NE(runner_log.find("ignored a job-finished message from evil#7: only the job's master"),
            std::string::npos)
      << runner_log;
  const auto name = worker.substr(0, worker.find('#'));
  const auto worker_log = read_file(r.job_dir + "/logs/" + name + ".log");
  EXPECT_NE(worker_log.find("refused membership epoch 0 from evil#7"), std::string::npos) << worker_log;
  EXPECT_TRUE(no_processes_of(r));
}

}  // namespace
}  // namespace troupe::testing
