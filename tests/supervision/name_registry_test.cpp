// The name registry on a real (threaded) actor system.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "troupe/supervision/name_registry.hpp"

namespace troupe::supervision {
namespace {

using namespace std::chrono_literals;

caf::behavior idle(caf::event_based_actor*) {
  return {[](int x) { return x; }};
}

class name_registry_test : public ::testing::Test {
 protected:
  static caf::actor_system_config& init(caf::actor_system_config& c) {
    c.set("scheduler.max-threads", 2);
    return c;
  }
  ~name_registry_test() override {
    for (auto& a : spawned_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
  caf::actor spawn() {
    spawned_.push_back(sys_.spawn(idle));
    return spawned_.back();
  }
  // Waits until `pred` holds, up to 10 s (a generous bound on a loaded machine).
  template <class Pred>
  bool eventually(Pred pred) {
    for (int i = 0; i < 1000; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return pred();
  }

  caf::actor_system_config cfg_;
  caf::actor_system sys_{init(cfg_)};
  name_registry names_;
  std::vector<caf::actor> spawned_;
};

TEST_F(name_registry_test, put_get_and_generations) {
  auto a = spawn(), b = spawn();
  EXPECT_FALSE(names_.get("ps/3"));
  EXPECT_EQ(names_.generation("ps/3"), 0u);
  EXPECT_EQ(names_.put("ps/3", a), 1u);
  EXPECT_EQ(names_.get("ps/3"), a);
  EXPECT_EQ(names_.put("ps/3", b), 2u);
  EXPECT_EQ(names_.get("ps/3"), b);
  EXPECT_TRUE(names_.erase("ps/3"));
  EXPECT_FALSE(names_.get("ps/3"));
  EXPECT_EQ(names_.generation("ps/3"), 2u) << "generations survive erase";
  EXPECT_FALSE(names_.erase("ps/3"));
  EXPECT_EQ(names_.put("ps/3", a), 3u);
}

TEST_F(name_registry_test, erase_if_leaves_a_newer_holder_alone) {
  auto old_one = spawn(), new_one = spawn();
  names_.put("worker/1", old_one);
  names_.put("worker/1", new_one);
  EXPECT_FALSE(names_.erase_if("worker/1", old_one.address()));
  EXPECT_EQ(names_.get("worker/1"), new_one);
  EXPECT_TRUE(names_.erase_if("worker/1", new_one.address()));
  EXPECT_FALSE(names_.get("worker/1"));
}

TEST_F(name_registry_test, names_lists_registered_names_sorted) {
  names_.put("worker/2", spawn());
  names_.put("master", spawn());
  names_.put("dispenser", spawn());
  names_.erase("worker/2");
  EXPECT_EQ(names_.names(), (std::vector<std::string>{"dispenser", "master"}));
  EXPECT_EQ(names_.size(), 2u);
}

TEST_F(name_registry_test, subscribers_see_puts_and_erases_until_unsubscribed) {
  std::vector<std::pair<std::string, bool>> seen;
  auto one = names_.subscribe("master", [&](const std::string& n, const caf::actor& a) {
    seen.emplace_back(n, static_cast<bool>(a));
  });
  std::size_t all_count = 0;
  auto all = names_.subscribe_all([&](const std::string&, const caf::actor&) { ++all_count; });
  names_.put("master", spawn());
  names_.put("worker/1", spawn());
  names_.erase("master");
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, bool>>{{"master", true}, {"master", false}}));
  EXPECT_EQ(all_count, 3u);
  one.reset();
  EXPECT_FALSE(one);
  names_.put("master", spawn());
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(all_count, 4u);
  {
    auto moved = std::move(all);
    EXPECT_FALSE(all);
  }
  names_.put("master", spawn());
  EXPECT_EQ(all_count, 4u) << "the moved-to subscription unsubscribed when destroyed";
}

TEST_F(name_registry_test, a_terminated_actor_is_taken_off_at_once) {
  auto a = spawn();
  std::mutex mu;
  std::condition_variable cv;
  bool gone = false;
  auto sub = names_.subscribe("dispenser", [&](const std::string&, const caf::actor& now) {
    if (now) return;
    std::lock_guard<std::mutex> g(mu);
    gone = true;
    cv.notify_all();
  });
  names_.put("dispenser", a);
  caf::anon_send_exit(a, caf::exit_reason::kill);
  std::unique_lock<std::mutex> g(mu);
  ASSERT_TRUE(cv.wait_for(g, 10s, [&] { return gone; }));
  EXPECT_FALSE(names_.get("dispenser"));
}

TEST_F(name_registry_test, registering_a_dead_actor_leaves_no_entry) {
  auto a = spawn();
  {
    caf::scoped_actor self{sys_};
    self->monitor(a);
    self->send_exit(a, caf::exit_reason::kill);
    self->receive([](caf::down_msg&) {});
  }
  names_.put("late", a);
  EXPECT_FALSE(names_.get("late"));
}

TEST_F(name_registry_test, concurrent_use_is_safe) {
  std::vector<caf::actor> actors;
  for (int i = 0; i < 8; ++i) actors.push_back(spawn());
  std::atomic<std::size_t> notified{0};
  auto sub = names_.subscribe_all([&](const std::string&, const caf::actor&) { ++notified; });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        auto name = "worker/" + std::to_string(i % 16);
        names_.put(name, actors[(i + t) % actors.size()]);
        (void)names_.get(name);
        if (i % 5 == 0) names_.erase(name);
        auto s = names_.subscribe(name, [](const std::string&, const caf::actor&) {});
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_GE(notified.load(), 8000u);
  for (auto& n : names_.names()) EXPECT_TRUE(names_.get(n)) << n;
}

}  // namespace
}  // namespace troupe::supervision
