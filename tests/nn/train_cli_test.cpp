// `troupe train --local` end to end: the real binary, its exit codes, its JSON line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_command.hpp"

namespace {

using troupe::test_util::command_result;

// stdout and stderr apart: the JSON line is stdout's only line.
command_result run(const std::string& args) {
  return troupe::test_util::run_troupe(args, troupe::test_util::stderr_mode::separate);
}

std::string example(const std::string& name) {
  return std::string(TROUPE_SOURCE_DIR) + "/examples/" + name;
}

using troupe::test_util::write_temp;

TEST(train_cli, deepfm_prints_progress_and_one_json_line) {
  auto r =
      run("train --local " + example("deepfm_synthetic.toml") +
          " --set data.rows=20000 --set data.test_rows=5000 --set train.epochs=2 --set train.log_every=20");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("epoch 1 step 20/79 loss"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("epoch 2: test loss"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"], "deepfm");
  EXPECT_EQ(j.value("backend", ""), "native") << "job.md lists it for every train --local";
  EXPECT_EQ(j["steps"], 158);
  EXPECT_EQ(j["history"].size(), 2u);
  EXPECT_GT(j["test_auc"].get<double>(), 0.6);
  EXPECT_GT(j["true_auc"].get<double>(), j["test_auc"].get<double>() - 0.05);
}

// The ring's batch rules do nothing in one process: said, where they were ignored silently.
TEST(train_cli, the_rings_batch_rules_are_noted_as_not_applying) {
  auto r = run("train --local " + example("fashion_mnist_mlp.toml") +
               " --set job.strategy=allreduce --set train.lr_scaling=linear --set train.epochs=1"
               " --set data.max_train_rows=2000 --set data.max_test_rows=500");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(
      r.err.find("troupe: note: train --local trains one process at train.batch_size with the job "
                 "file's learning rate: train.batch = \"fixed\" and train.lr_scaling = \"linear\" apply to "
                 "`troupe run`"),
      std::string::npos)
      << r.err;
  auto plain = run("train --local " + example("fashion_mnist_mlp.toml") +
                   " --set train.epochs=1 --set data.max_train_rows=2000 --set data.max_test_rows=500");
  EXPECT_EQ(plain.err.find("troupe: note: train --local trains one process"), std::string::npos) << plain.err;
}

TEST(train_cli, bad_config_is_exit_2_naming_the_key) {
  auto r = run("train --local " + example("deepfm_synthetic.toml") + " --set train.epoch=2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("train.epoch"), std::string::npos) << r.err;
  r = run("train --local " + example("deepfm_synthetic.toml") + " --set model.type=resnet");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("key 'model.type': model type 'resnet' is not registered"), std::string::npos)
      << r.err;
  r = run("train --local " + example("deepfm_synthetic.toml") + " --set train.optimizer=rmsprop");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("train.optimizer"), std::string::npos) << r.err;
  r = run("train " + example("deepfm_synthetic.toml"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("only --local"), std::string::npos) << r.err;
}

TEST(train_cli, unreadable_data_is_exit_1_naming_the_file) {
  auto job = write_temp("bad_data.toml",
                        "[model]\ntype = 'mlp'\n[data]\nsource = 'fashion-mnist'\ndir = '/nonexistent'\n");
  auto r = run("train --local " + job);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/train-images-idx3-ubyte.gz"), std::string::npos) << r.err;
}

TEST(train_cli, config_check_validates_the_nn_sections) {
  auto r = run("config check " + example("fashion_mnist_cnn.toml"));
  EXPECT_EQ(r.code, 0) << r.err;
  auto job = write_temp("typo.toml", "[model]\ntype = 'mlp'\nhiden = [10]\n");
  r = run("config check " + job);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("model.hiden"), std::string::npos) << r.err;
}

}  // namespace
