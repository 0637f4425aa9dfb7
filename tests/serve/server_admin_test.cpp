// Who runs a server: the one process that holds its server.lock exclusively. Lookers (serve status,
// jobs prune, the dashboard) take a shared lock for a moment and never read as a server to each
// other or to a second `troupe serve` of the name (which tries its exclusive lock again for a while).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "run_command.hpp"
#include "troupe/serve/serve.hpp"

namespace troupe::serve {
namespace {

namespace fs = std::filesystem;

TEST(server_admin, a_looker_is_not_a_server_the_holder_of_the_exclusive_lock_is) {
  const auto root = troupe::test_util::temp_path("server-admin");
  fs::remove_all(root);
  const auto dir = fs::path(state_dir(root.string(), "mlp"));
  fs::create_directories(dir);
  std::ofstream(dir / "server.json") << R"({"name": "mlp", "state": "serving"})";
  const int fd = ::open((dir / "server.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(server_running(dir.string())) << "nobody holds it";
  ASSERT_EQ(::flock(fd, LOCK_SH | LOCK_NB), 0);
  EXPECT_FALSE(server_running(dir.string())) << "another looker's shared lock (it read as a server)";
  ASSERT_EQ(::flock(fd, LOCK_UN), 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_TRUE(server_running(dir.string())) << "the exclusive lock a server holds";
  auto list = list_servers(root.string());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_TRUE(list[0].running);
  EXPECT_EQ(list[0].name, "mlp");
  ::close(fd);
  EXPECT_FALSE(list_servers(root.string())[0].running);
  fs::remove_all(root);
}

}  // namespace
}  // namespace troupe::serve
