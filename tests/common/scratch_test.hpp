// A gtest fixture with a scratch folder of its own: made before each test, removed after it.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "run_command.hpp"

namespace troupe::test_util {

class scratch_test : public ::testing::Test {
 protected:
  // The folder is temp_path(name): unique to this process and fixture.
  explicit scratch_test(const std::string& name) : dir_(temp_path(name)) {}
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes `text` to <dir>/<name>; returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
    return path(name);
  }
  std::filesystem::path dir_;
};

}  // namespace troupe::test_util
