// model::job_state of an async_ps job that wrote no final state: its PS shards' checkpoints merged,
// and the directory the state came from named as their directory (ps-0, ps-1, ...), where model.json's
// job.state named ps-0 alone though every shard was read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "troupe/model/state.hpp"

namespace troupe::model {
namespace {

namespace fs = std::filesystem;

TEST(job_state, the_shards_state_is_every_shards_and_names_their_directory) {
  const auto job = fs::temp_directory_path() / ("troupe-job-state-" + std::to_string(::getpid()));
  fs::remove_all(job);
  const std::string ckpt = (job / "checkpoints").string();
  for (int i : {0, 1}) {
    storage::shard_state s;
    s.dense["w" + std::to_string(i)] = std::vector<float>{static_cast<float>(i), 2.0f};
    state_meta meta;
    meta.from = "checkpoint";
    ASSERT_TRUE(write_state(ckpt + "/ps-" + std::to_string(i), s, meta));
  }
  auto two = job_state(places_of(job.string(), ckpt, 2));
  ASSERT_TRUE(two) << two.err().to_string();
  EXPECT_EQ(two->dir, ckpt);
  EXPECT_EQ(two->state.dense.size(), 2u) << "both shards' tensors";
  EXPECT_EQ(two->meta.writer, "the PS shards");
  auto one = job_state(places_of(job.string(), ckpt, 1));
  ASSERT_TRUE(one) << one.err().to_string();
  EXPECT_EQ(one->dir, ckpt + "/ps-0") << "one shard: its own directory";
  fs::remove_all(job);
}

}  // namespace
}  // namespace troupe::model
