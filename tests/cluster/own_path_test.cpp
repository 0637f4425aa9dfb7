// The one rule troupe trusts a path by on a shared machine (cluster/own_path.hpp). The tests run as
// root; "another user" is uid 65534 (nobody), given the files with chown.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "test_util.hpp"
#include "troupe/cluster/own_path.hpp"

namespace troupe::cluster {
namespace {

using testing::temp_dir;

std::string make_dir(const temp_dir& root, const char* name, unsigned mode) {
  const std::string p = root / name;
  EXPECT_EQ(::mkdir(p.c_str(), 0700), 0);
  EXPECT_EQ(::chmod(p.c_str(), mode), 0);
  return p;
}

TEST(own_path, only_this_users_own_unwritable_by_others_and_no_link_is_own) {
  temp_dir root;
  EXPECT_EQ(not_own(root / "missing"), "") << "missing: for the caller to decide";
  EXPECT_EQ(not_own(make_dir(root, "mine", 0755)), "");
  EXPECT_EQ(not_own(make_dir(root, "private", 0700)), "");
  const auto world = make_dir(root, "world", 0777);
  EXPECT_NE(not_own(world).find("other users may write in it (mode 0777)"), std::string::npos)
      << not_own(world);
  // Group write by the user's own group (a user private group, umask 002) is the user alone.
  const auto group = make_dir(root, "group", 0775);
  ASSERT_EQ(::chown(group.c_str(), ::geteuid(), ::getegid()), 0);
  EXPECT_EQ(not_own(group), "");
  ASSERT_EQ(::chown(group.c_str(), ::geteuid(), 65534), 0);
  EXPECT_NE(not_own(group).find("other users may write in it"), std::string::npos) << "another group's";
  const auto theirs = make_dir(root, "theirs", 0700);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  EXPECT_EQ(not_own(theirs), "another user's (uid 65534)");
  const std::string link = root / "link";
  ASSERT_EQ(::symlink((root / "mine").c_str(), link.c_str()), 0);
  EXPECT_NE(not_own(link).find("a link stands there"), std::string::npos) << "a link to the user's own";
  const std::string file = root / "model.pt";
  std::ofstream(file) << "x";
  ASSERT_EQ(::chmod(file.c_str(), 0646), 0);
  EXPECT_NE(not_own(file).find("mode 0646"), std::string::npos) << "files follow the same rule";
  // A directory troupe keeps things in: the same rule, and nothing else standing in its place.
  EXPECT_EQ(not_own_directory(root / "mine"), "");
  EXPECT_EQ(not_own_directory(file), "not a directory");
  EXPECT_NE(not_own_directory(link).find("a link stands there"), std::string::npos);
  EXPECT_EQ(not_own_directory(theirs), "another user's (uid 65534)");
}

TEST(own_path, a_directory_holding_a_cache_must_not_let_another_user_replace_its_entries) {
  temp_dir root;
  EXPECT_EQ(shared_parent_problem(root / "missing"), "");
  EXPECT_EQ(shared_parent_problem(make_dir(root, "mine", 0755)), "");
  const auto open_dir = make_dir(root, "open", 0777);
  EXPECT_NE(shared_parent_problem(open_dir).find("without the sticky bit"), std::string::npos);
  EXPECT_EQ(shared_parent_problem(make_dir(root, "sticky", 01777)), "")
      << "as /tmp: nobody renames another's";
  const auto theirs = make_dir(root, "theirs", 01777);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  EXPECT_NE(shared_parent_problem(theirs).find("another user's (uid 65534)"), std::string::npos)
      << "its owner renames what it likes, sticky or not";
  const auto roots = make_dir(root, "roots", 01777);
  ASSERT_EQ(::chown(roots.c_str(), 0, 0), 0);
  EXPECT_EQ(shared_parent_problem(roots), "") << "root's sticky directory";
  std::ofstream(root / "file") << "x";
  EXPECT_EQ(shared_parent_problem(root / "file"), "not a directory");
}

// A user's place under a shared root: <root>/<name> unless another user made it first.
TEST(own_path, each_user_keeps_theirs_beside_a_place_another_user_made) {
  temp_dir root;
  const std::string shared = root / "serve", mine = shared + "-" + std::to_string(::geteuid());
  EXPECT_EQ(own_subdir(root.str(), "serve"), shared) << "none yet";
  make_dir(root, "serve", 0755);
  EXPECT_EQ(own_subdir(root.str(), "serve"), shared) << "the user's own";
  ASSERT_EQ(::chown(shared.c_str(), 65534, 65534), 0);
  EXPECT_EQ(own_subdir(root.str(), "serve"), mine);
  EXPECT_TRUE(is_own_subdir_name("serve", "serve"));
  EXPECT_TRUE(is_own_subdir_name("serve-1000", "serve"));
  EXPECT_FALSE(is_own_subdir_name("serve-", "serve"));
  EXPECT_FALSE(is_own_subdir_name("serve-mine-4000.log", "serve"));
  EXPECT_FALSE(is_own_subdir_name("server", "serve"));
  EXPECT_FALSE(is_own_subdir_name("datasets-0", "serve"));
}

}  // namespace
}  // namespace troupe::cluster
