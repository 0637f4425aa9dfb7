// The dataset cache's entries (job/dataset_cache.hpp): listed with their size, last use and whether
// a job pins them; pruned only when no job does (deleting an entry mid-job failed the job at its
// evaluation); a pin taken while a prune removes its entry holds the new entry, not the removed one.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "troupe/job/dataset_cache.hpp"

namespace troupe::job {
namespace {

namespace fs = std::filesystem;

// An entry's directory name as a job's dataset key makes it (data.cpp's data_key): "<source>-<hash>".
std::string key_of(const std::string& source) {
  return source + "-0123456789abcdef";
}

struct cache_dir {
  fs::path path = fs::temp_directory_path() / ("troupe-cache-test-" + std::to_string(::getpid()));
  cache_dir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~cache_dir() { fs::remove_all(path); }
  std::string entry(const std::string& key, std::size_t bytes, std::chrono::hours age) {
    const auto dir = path / key_of(key) / "train";
    fs::create_directories(dir);
    std::ofstream(dir / "data.mdb") << std::string(bytes, 'x');
    const auto then = fs::file_time_type::clock::now() - age;
    fs::last_write_time(dir / "data.mdb", then);
    return (path / key_of(key)).string();
  }
};

TEST(dataset_cache, entries_in_use_are_listed_and_never_pruned) {
  cache_dir c;
  const auto old_entry = c.entry("old", 1000, std::chrono::hours(72));
  c.entry("recent", 2000, std::chrono::hours(1));
  const auto pinned = c.entry("pinned", 3000, std::chrono::hours(96));
  auto list = list_cache(c.path.string());
  ASSERT_TRUE(list) << list.err().to_string();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ(list->front().key, key_of("recent")) << "most recently used first";
  EXPECT_EQ(list->front().bytes, 2000u);
  {
    auto pin = cache_pin::take(pinned);  // a job's: marks the entry used now
    ASSERT_TRUE(pin) << pin.err().to_string();
    list = list_cache(c.path.string());
    ASSERT_TRUE(list);
    EXPECT_EQ(list->front().key, key_of("pinned"));
    EXPECT_TRUE(list->front().in_use);
    // Older than two days: only "old" (the pinned one was used now); then every unpinned one.
    const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    std::vector<cache_entry> kept;
    auto removed = prune_cache(c.path.string(), now_ms - 48 * 3'600'000, false, &kept);
    ASSERT_TRUE(removed) << removed.err().to_string();
    ASSERT_EQ(removed->size(), 1u);
    EXPECT_EQ(removed->front().key, key_of("old"));
    EXPECT_FALSE(fs::exists(old_entry));
    auto dry = prune_cache(c.path.string(), now_ms + 1000, true, &kept);
    ASSERT_TRUE(dry);
    ASSERT_EQ(dry->size(), 1u);
    EXPECT_EQ(dry->front().key, key_of("recent"));
    EXPECT_TRUE(fs::exists(c.path / key_of("recent"))) << "a dry run removes nothing";
    removed = prune_cache(c.path.string(), now_ms + 1000, false, &kept);
    ASSERT_TRUE(removed);
    EXPECT_EQ(removed->size(), 1u);
    EXPECT_TRUE(fs::exists(pinned)) << "a pinned entry stays";
    ASSERT_FALSE(kept.empty());
    EXPECT_EQ(kept.back().key, key_of("pinned"));
  }
  auto removed = prune_cache(c.path.string(), std::numeric_limits<std::int64_t>::max(), false);
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->size(), 1u) << "unpinned once the job is over";
  EXPECT_FALSE(fs::exists(pinned));
}

// A directory no job made (`--cache` mistyped: a directory of the user's own files) is listed as no
// entry, never measured, and never pruned; before 2026-12-07 `data cache prune --cache DIR` removed
// every directory in DIR. A name a dataset key could have without a job's files is no entry either.
TEST(dataset_cache, directories_no_job_made_are_never_pruned) {
  cache_dir c;
  const auto entry = c.entry("fashion-mnist", 10, std::chrono::hours(100));
  for (const auto& d : {std::string("thesis"), key_of("photos")}) {
    fs::create_directories(c.path / d / "train");
    std::ofstream(c.path / d / "chapter1.txt") << "precious";
  }
  auto list = list_cache(c.path.string());
  ASSERT_TRUE(list) << list.err().to_string();
  ASSERT_EQ(list->size(), 3u);
  std::size_t made = 0;
  for (const auto& e : *list) {
    made += e.made_by_a_job;
    if (!e.made_by_a_job) {
      EXPECT_EQ(e.bytes, 0u) << e.key << ": not measured";
    }
  }
  EXPECT_EQ(made, 1u);
  std::vector<cache_entry> kept, skipped;
  auto removed =
      prune_cache(c.path.string(), std::numeric_limits<std::int64_t>::max(), false, &kept, &skipped);
  ASSERT_TRUE(removed) << removed.err().to_string();
  ASSERT_EQ(removed->size(), 1u);
  EXPECT_EQ(removed->front().key, key_of("fashion-mnist"));
  EXPECT_FALSE(fs::exists(entry));
  EXPECT_EQ(skipped.size(), 2u);
  EXPECT_TRUE(fs::exists(c.path / "thesis" / "chapter1.txt"));
  EXPECT_TRUE(fs::exists(c.path / key_of("photos") / "chapter1.txt"));
}

// A pin taken on an entry that was removed meanwhile is taken again on the new entry: a prune that
// removed the directory between the pin's open and its lock must not leave the job pinning nothing.
TEST(dataset_cache, a_pin_holds_the_entry_that_exists) {
  cache_dir c;
  const auto dir = c.entry("e", 10, std::chrono::hours(1));
  auto pin = cache_pin::take(dir);
  ASSERT_TRUE(pin) << pin.err().to_string();
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/in_use").c_str(), &st), 0);
  pin->reset();
  fs::remove_all(dir);
  pin = cache_pin::take(dir);  // made again
  ASSERT_TRUE(pin) << pin.err().to_string();
  EXPECT_TRUE(fs::exists(dir + "/in_use"));
  auto removed = prune_cache(c.path.string(), std::numeric_limits<std::int64_t>::max(), false);
  ASSERT_TRUE(removed);
  EXPECT_TRUE(removed->empty()) << "pinned";
}

// An entry another user made (a cache directory several users share): a job never reads it (its
// records could be anyone's: another user flipped a job's labels through one), listing does not open
// its files (a link in it made root's listing overwrite a file of root's), prune leaves it alone.
TEST(dataset_cache, another_users_entry_is_never_read_opened_or_pruned) {
  cache_dir c;
  const auto theirs = c.entry("theirs", 100, std::chrono::hours(100));
  const auto victim = (c.path / "victim").string();
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, theirs + "/train/lock.mdb");
  fs::create_symlink(victim, theirs + "/in_use");
  for (const auto& e : fs::recursive_directory_iterator(theirs))
    ASSERT_EQ(::lchown(e.path().c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  auto list = list_cache(c.path.string());
  ASSERT_TRUE(list) << list.err().to_string();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_FALSE(list->front().ours);
  auto removed = prune_cache(c.path.string(), std::numeric_limits<std::int64_t>::max(), false);
  ASSERT_TRUE(removed);
  EXPECT_TRUE(removed->empty());
  EXPECT_TRUE(fs::exists(theirs));
  auto pin = cache_pin::take(theirs);
  ASSERT_FALSE(pin);
  EXPECT_NE(pin.err().to_string().find("another user's"), std::string::npos) << pin.err().to_string();
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious");
}

// A root several users share: the first user's root/datasets is no place for another's entries (its
// owner could replace them), so each other user's jobs default to root/datasets-<uid> (they failed at
// their first import: the entry could not be made, or was refused).
TEST(dataset_cache, in_a_root_another_user_made_the_cache_in_each_user_gets_their_own) {
  cache_dir root;
  const auto shared = (root.path / "datasets").string();
  EXPECT_EQ(default_dataset_cache(root.path.string()), shared) << "none yet: the root's";
  fs::create_directories(shared);
  EXPECT_EQ(default_dataset_cache(root.path.string()), shared) << "the user's own";
  ASSERT_EQ(::chown(shared.c_str(), 65534, 65534), 0);
  EXPECT_EQ(default_dataset_cache(root.path.string()), shared + "-" + std::to_string(::geteuid()));
  auto pin = cache_pin::take(shared + "/abc");
  ASSERT_FALSE(pin) << "an entry in another user's cache directory";
  EXPECT_FALSE(fs::exists(shared + "/abc")) << "nothing made in it";
  EXPECT_NE(pin.err().to_string().find("its cache directory " + shared + " is no place"), std::string::npos)
      << pin.err().to_string();
  EXPECT_TRUE(cache_pin::take(default_dataset_cache(root.path.string()) + "/abc")) << "the user's own cache";
}

}  // namespace
}  // namespace troupe::job
