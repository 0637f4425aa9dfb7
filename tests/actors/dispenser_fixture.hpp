// The dispenser tests' fixture: a task_dispenser over a tiny dataset (4 tasks of 10 records, 2
// failures quarantine a task) on a fake node and a manual clock, and the worker's side of leases
// and reports.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "fake_node.hpp"
#include "master/dispenser.hpp"
#include "troupe/job/data.hpp"

namespace troupe::actors {

using testing::fake_node;
using testing::incoming;

struct lease_reply {
  bool task = false, none = false, finished = false;
  std::uint64_t id = 0;
  std::uint32_t attempt = 0;
  std::uint64_t lease_ms = 0;
  std::uint64_t trained = 0, trained_step = 0;  // rows kept from an earlier holder, and their step
};

class dispenser_test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("dispenser-test");
    nn::dataset d = testing::tiny_dataset();
    ASSERT_TRUE(job::write_dataset(d, dir_ + "/train", "test"));
    node_identity who{node_id{"master", 1}, cluster::node_role::master, 0, dir_, "job", "job", 0};
    node_.emplace(who);
    node_->spec().job.records_per_task = 10;  // 4 tasks
    node_->spec().job.max_task_failures = 2;
    node_->spec().job.lease_timeout = std::chrono::milliseconds(1000);
    node_->spec().nn.train.epochs = 1;
    disp_.emplace(*node_, data_paths{dir_ + "/train", ""});
  }
  void TearDown() override {
    disp_.reset();
    std::filesystem::remove_all(dir_);
  }

  // `worker` asks for a task, naming the tasks it keeps; returns the dispenser's answer.
  lease_reply request(const node_id& worker, std::vector<std::uint64_t> holding = {}) {
    disp_->on_message(incoming(
        worker, "rpc", "dispenser",
        [&](auto body) {
          auto r = body.initTaskRequest();
          auto h = r.initHolding(static_cast<unsigned>(holding.size()));
          for (unsigned i = 0; i < holding.size(); ++i) h.set(i, holding[i]);
        },
        ++correlation_));
    auto out = node_->take();
    EXPECT_EQ(out.size(), 1u);
    if (out.empty()) return {};
    EXPECT_EQ(out[0].node, worker.name);
    EXPECT_EQ(out[0].to, "rpc");
    EXPECT_EQ(out[0].m.envelope().getCorrelationId(), correlation_);  // the requester pairs it by that
    auto l = out[0].m.body().getTaskLease();
    lease_reply r;
    r.lease_ms = l.getLeaseMs();
    switch (l.which()) {
      case schema::TaskLease::TASK:
        r.task = true;
        r.id = l.getTask().getId();
        r.attempt = l.getTask().getAttempt();
        r.trained = l.getTask().getTrained();
        r.trained_step = l.getTask().getTrainedStep();
        break;
      case schema::TaskLease::NONE:
        r.none = true;
        break;
      case schema::TaskLease::FINISHED:
        r.finished = true;
        break;
    }
    return r;
  }

  // `worker` reports task `id` (attempt) done, or failed with `failure` after `failed_after` rows;
  // returns the ack's error ("" = accepted).
  std::string report(const node_id& worker, std::uint64_t id, std::uint32_t attempt,
                     const std::string& failure = "", std::uint64_t failed_after = 0,
                     std::uint64_t step = 0) {
    disp_->on_message(incoming(
        worker, "rpc", "dispenser",
        [&](auto body) {
          auto r = body.initTaskReport();
          r.setTaskId(id);
          r.setAttempt(attempt);
          if (failure.empty())
            r.setDone();
          else
            r.setFailed(failure);
          r.setFailedAfter(failed_after);
          r.setStep(step);
        },
        ++correlation_));
    auto out = node_->take();
    EXPECT_EQ(out.size(), 1u);
    if (out.empty()) return "no ack";
    EXPECT_EQ(out[0].node, worker.name);
    EXPECT_EQ(out[0].m.envelope().getCorrelationId(), correlation_);
    return out[0].m.body().getTaskReportAck().getError().cStr();
  }

  // `worker` asks until it is leased task `id`, keeping every task it gets (in `held`); returns
  // that lease's attempt (0: never leased).
  std::uint32_t lease_until(const node_id& worker, std::uint64_t id, std::vector<std::uint64_t>& held) {
    for (int i = 0; i < 8; ++i) {
      auto r = request(worker, held);
      if (!r.task) return 0;
      held.push_back(r.id);
      if (r.id == id) return r.attempt;
    }
    return 0;
  }

  storage::task_counts counts() const { return *disp_->journal().counts(); }

  std::string dir_;
  std::optional<fake_node> node_;
  std::optional<task_dispenser> disp_;
  std::uint64_t correlation_ = 0;
  const node_id w0{"worker-0", 1}, w1{"worker-1", 1};
};

}  // namespace troupe::actors
