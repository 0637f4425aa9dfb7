#include "troupe/transport/config.hpp"

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "troupe/transport/errc.hpp"

namespace troupe {
namespace {

TEST(transport_config, reads_the_section_and_checks_relations) {
  auto doc =
      config_doc::from_string("[transport]\nheartbeat_ms = 50\nheartbeat_timeout_ms = 300\ntoken = \"t\"\n");
  ASSERT_TRUE(doc);
  config_reader r(*doc);
  auto c = transport_config::read(r.section("transport"));
  ASSERT_TRUE(r.finish());
  EXPECT_EQ(c.heartbeat_interval.count(), 50);
  EXPECT_EQ(c.heartbeat_timeout.count(), 300);
  EXPECT_EQ(c.listen_host, "127.0.0.1");
  EXPECT_TRUE(c.validate());

  auto bad = config_doc::from_string("[transport]\nheartbeat_ms = 500\nheartbeat_timeout_ms = 300\n");
  config_reader r2(*bad);
  (void)transport_config::read(r2.section("transport"));
  auto f = r2.finish();
  ASSERT_FALSE(f);
  EXPECT_NE(f.err().to_string().find("heartbeat_timeout_ms"), std::string::npos) << f.err().to_string();
}

TEST(transport_config, default_heartbeat_timeout_is_well_under_two_seconds) {
  transport_config c;
  EXPECT_LT(c.heartbeat_timeout.count(), 2000);
  EXPECT_GT(c.heartbeat_timeout, c.heartbeat_interval);
}

TEST(load_token, file_then_environment_then_inline) {
  auto path = std::filesystem::temp_directory_path() / ("troupe_token_" + std::to_string(::getpid()));
  std::ofstream(path) << "from-file\n";
  ::setenv("TROUPE_TEST_TOKEN", "from-env", 1);
  EXPECT_EQ(*load_token(path.string(), "TROUPE_TEST_TOKEN", "inline"), "from-file");
  EXPECT_EQ(*load_token("", "TROUPE_TEST_TOKEN", "inline"), "from-env");
  ::unsetenv("TROUPE_TEST_TOKEN");
  EXPECT_EQ(*load_token("", "TROUPE_TEST_TOKEN", "inline"), "inline");
  auto missing = load_token("/nonexistent/token", "", "");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.err(), transport_errc::token_error);
  EXPECT_NE(missing.err().context().find("/nonexistent/token"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(parse_host_port, accepts_host_port_and_names_bad_text) {
  auto a = parse_host_port("127.0.0.1:7000");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 7000);
  EXPECT_EQ(parse_host_port("[::1]:5")->host, "::1");
  for (const char* bad : {"nohost", ":7", "h:", "h:70000", "h:12x"}) {
    auto r = parse_host_port(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.err(), transport_errc::bad_address);
  }
}

}  // namespace
}  // namespace troupe
