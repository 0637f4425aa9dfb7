// The TorchScript trainer backend through its plugin, on modules scripted by make_modules.py: the
// contract (parameters alias the flat buffers, gradients land in them, emb's gradient becomes the
// table's sparse gradient, a module's own loss is used) and every error a user's module can cause,
// each with its message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "troupe/actors/torchscript.hpp"

namespace troupe::actors {
namespace {

namespace fs = std::filesystem;

// The modules, made once per build (test processes run in parallel: made aside, then renamed; the
// name changes with the set of modules).
std::string modules_dir() {
  static std::string dir = [] {
    fs::path d = TROUPE_TEST_BINARY_DIR "/modules-9";
    if (fs::exists(d / "garbage.pt")) return d.string();
    auto tmp = d.string() + ".tmp" + std::to_string(::getpid());
    std::string cmd = "/usr/bin/python3 " TROUPE_TEST_SOURCE_DIR "/make_modules.py " + tmp + " > /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::error_code ec;
    fs::rename(tmp, d, ec);
    if (ec) fs::remove_all(tmp);
    return d.string();
  }();
  return dir;
}

torchscript_options options(const std::string& module, std::size_t dense_dim = 4, std::size_t classes = 3,
                            std::size_t fields = 0) {
  torchscript_options o;
  o.path = modules_dir() + "/" + module + ".pt";
  o.data.name = "test";
  o.data.dense_dim = dense_dim;
  o.data.num_classes = classes;
  o.data.sparse_fields = fields;
  o.embedding_dim = 4;
  o.optimizer.type = "adam";
  o.optimizer.learning_rate = 0.05;
  return o;
}

std::string error_of(const torchscript_options& o) {
  auto b = load_torchscript(o);
  EXPECT_FALSE(b) << o.path << " loaded";
  return b ? std::string() : b.err().to_string();
}

// Three well separated blobs in 4 dimensions.
nn::dataset blobs(std::size_t rows = 96) {
  nn::dataset d;
  d.info = {"blobs", 4, 0, 3, {}, 0};
  d.rows = rows;
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 0.3f);
  for (std::size_t i = 0; i < rows; ++i) {
    auto c = i % 3;
    for (std::size_t k = 0; k < 4; ++k) d.dense.push_back(n(rng) + (k == c ? 2.0f : 0.0f));
    d.labels.push_back(static_cast<float>(c));
  }
  return d;
}

TEST(torchscript_backend, parameters_alias_the_flat_buffers_and_it_learns) {
  auto b = load_torchscript(options("dense"));
  ASSERT_TRUE(b) << b.err().to_string();
  auto& be = **b;
  EXPECT_EQ(be.name(), "torchscript");
  ASSERT_EQ(be.layout().size(), 4u);  // two weights, two biases
  EXPECT_EQ(be.parameters().size(), 4u * 8 + 8 + 8 * 3 + 3);
  EXPECT_EQ(be.output_width(), 3u);
  auto d = blobs();
  nn::batch all(d, 0, d.rows);
  // Gradients land in the flat buffer, and are zeroed (not accumulated) batch to batch.
  ASSERT_TRUE(be.compute_gradients(all));
  std::vector<float> g1(be.gradients().begin(), be.gradients().end());
  ASSERT_TRUE(be.compute_gradients(all));
  std::vector<float> g2(be.gradients().begin(), be.gradients().end());
  EXPECT_EQ(g1, g2);
  float norm = 0;
  for (float g : g1) norm += g * g;
  EXPECT_GT(norm, 0.0f);
  auto first = be.predict(all);
  ASSERT_TRUE(first);
  for (int s = 0; s < 40; ++s) ASSERT_TRUE(be.step(nn::batch(d, (s * 24) % 72, 24)));
  auto later = be.predict(all);
  ASSERT_TRUE(later);
  EXPECT_LT(*later, *first * 0.5f);
  // The dense_params the PS serves are the same memory.
  EXPECT_EQ(be.dense_parameters()[0]->value.data(), be.parameters().data());
  // What is written into parameters() is what the module computes with: all zero, uniform output.
  std::fill(be.parameters().begin(), be.parameters().end(), 0.0f);
  ASSERT_TRUE(be.predict(all));
  for (float p : be.probabilities().first(3 * d.rows)) EXPECT_NEAR(p, 1.0f / 3, 1e-6f);
}

// Buffers of another dtype than float32 (an int64 step counter, a float64 scale) are buffers() too,
// as float32, both ways: a replica given another's buffers computes what it does. They were left
// out of buffers(): never copied between replicas, checkpointed or exported (a job reported 0.87
// accuracy and its exported model scored 0.31).
TEST(torchscript_backend, buffers_of_other_dtypes_travel_as_floats) {
  auto a = load_torchscript(options("wide_buffers"));
  auto b = load_torchscript(options("wide_buffers"));
  ASSERT_TRUE(a && b) << (a ? b.err() : a.err()).to_string();
  const auto names = (*a)->buffer_names();
  ASSERT_EQ(names, (std::vector<std::string>{"seen", "scale"}));
  auto d = blobs();
  for (int s = 0; s < 3; ++s) ASSERT_TRUE((*a)->step(nn::batch(d, s * 8, 8)));
  EXPECT_EQ((*a)->buffers()[0][0], 3.0f);
  EXPECT_EQ((*a)->buffers()[1][0], 3.375f);
  auto pa = (*a)->parameters();
  std::copy(pa.begin(), pa.end(), (*b)->parameters().begin());
  for (std::size_t i = 0; i < names.size(); ++i)
    std::copy((*a)->buffers()[i].begin(), (*a)->buffers()[i].end(), (*b)->buffers()[i].begin());
  nn::batch all(d, 0, d.rows);
  ASSERT_TRUE((*a)->predict(all) && (*b)->predict(all));
  EXPECT_TRUE(
      std::equal((*a)->probabilities().begin(), (*a)->probabilities().end(), (*b)->probabilities().begin()))
      << "the copy computes otherwise: its buffers did not travel";
}

// A training forward that reassigns its buffers (`self.mu = 0.9 * self.mu + ...`, `self.steps = self.steps
// + 1`) rather than updating them in place: the replica's buffers follow (they read the freed tensor:
// heap corruption on 3 workers, garbage such as -1.24e10 in the exported mu, and the counter stayed 0),
// and values written into them (a sync, a restore) are what the module reads.
TEST(torchscript_backend, buffers_a_forward_reassigns_are_carried) {
  auto a = load_torchscript(options("reassigns_buffers"));
  auto b = load_torchscript(options("reassigns_buffers"));
  ASSERT_TRUE(a && b) << (a ? b.err() : a.err()).to_string();
  ASSERT_EQ((*a)->buffer_names(), (std::vector<std::string>{"mu", "steps"}));
  auto d = blobs();
  std::vector<double> mu(4, 0.0);
  for (int s = 0; s < 5; ++s) {
    ASSERT_TRUE((*a)->step(nn::batch(d, s * 8, 8)));
    for (std::size_t k = 0; k < 4; ++k) {
      double mean = 0;
      for (std::size_t r = 0; r < 8; ++r) mean += d.dense[(s * 8 + r) * 4 + k] / 8.0;
      mu[k] = 0.9 * mu[k] + 0.1 * mean;
    }
  }
  for (std::size_t k = 0; k < 4; ++k) EXPECT_NEAR((*a)->buffers()[0][k], mu[k], 1e-5) << "mu[" << k << "]";
  EXPECT_EQ((*a)->buffers()[1][0], 5.0f) << "the counter";
  auto pa = (*a)->parameters();
  std::copy(pa.begin(), pa.end(), (*b)->parameters().begin());
  for (std::size_t i = 0; i < 2; ++i)
    std::copy((*a)->buffers()[i].begin(), (*a)->buffers()[i].end(), (*b)->buffers()[i].begin());
  nn::batch all(d, 0, d.rows);
  ASSERT_TRUE((*a)->predict(all) && (*b)->predict(all));
  EXPECT_TRUE(
      std::equal((*a)->probabilities().begin(), (*a)->probabilities().end(), (*b)->probabilities().begin()))
      << "a's module reads other buffers than its replica's";
  std::fill((*a)->buffers()[0].begin(), (*a)->buffers()[0].end(), 0.0f);  // as a sync would
  ASSERT_TRUE((*a)->predict(all));
  EXPECT_FALSE(
      std::equal((*a)->probabilities().begin(), (*a)->probabilities().end(), (*b)->probabilities().begin()))
      << "values written into the buffers did not reach the module";
}

// A buffer reassigned by every forward, the load's probe (eval mode) included: a value written into
// the buffers then (a restore, an init) is what the next forward reads (the probe left the module on
// its own tensor, and the restored 100 was lost: 2 after the step).
TEST(torchscript_backend, a_buffer_the_probe_reassigned_still_takes_a_restore) {
  auto a = load_torchscript(options("counts_every_forward"));
  ASSERT_TRUE(a) << a.err().to_string();
  ASSERT_EQ((*a)->buffer_names(), (std::vector<std::string>{"n"}));
  (*a)->buffers()[0][0] = 100.0f;
  auto d = blobs();
  ASSERT_TRUE((*a)->step(nn::batch(d, 0, 8)));
  EXPECT_EQ((*a)->buffers()[0][0], 101.0f);
  ASSERT_TRUE((*a)->predict(nn::batch(d, 0, 8)));
  EXPECT_EQ((*a)->buffers()[0][0], 102.0f) << "an evaluation's forward counts too";
}

// An integer buffer float32 cannot hold (1000000007) is left as the module has it: carried as float32
// it read 1000000000, written back before every forward (a job's accuracy 0.50 for 0.95).
TEST(torchscript_backend, an_integer_buffer_beyond_float32_is_left_as_the_module_has_it) {
  auto b = load_torchscript(options("big_const"));
  ASSERT_TRUE(b) << b.err().to_string();
  EXPECT_TRUE((*b)->buffer_names().empty());
  auto d = blobs();
  for (int s = 0; s < 3; ++s) ASSERT_TRUE((*b)->step(nn::batch(d, s * 8, 8)));
  nn::batch all(d, 0, d.rows);
  ASSERT_TRUE((*b)->predict(all));
  float best0 = 0;
  for (std::size_t r = 0; r < d.rows; ++r) best0 = std::max(best0, (*b)->probabilities()[3 * r]);
  EXPECT_GT(best0, 0.05f) << "class 0's logit was shifted by the rounded constant";
}

TEST(torchscript_backend, a_module_loss_method_replaces_cross_entropy) {
  auto plain = load_torchscript(options("dense"));
  auto own = load_torchscript(options("with_loss"));
  ASSERT_TRUE(plain && own);
  // The same weights in both (the two modules were initialised apart).
  ASSERT_EQ((*plain)->parameters().size(), (*own)->parameters().size());
  std::copy((*plain)->parameters().begin(), (*plain)->parameters().end(), (*own)->parameters().begin());
  auto d = blobs();
  auto a = (*plain)->compute_gradients(nn::batch(d, 0, 12));
  auto b = (*own)->compute_gradients(nn::batch(d, 0, 12));
  ASSERT_TRUE(a && b);
  EXPECT_NEAR(*b, 2.0f * *a, 1e-5f);
  // The built-in loss' gradient (computed on the host, builtin_loss.hpp) is libtorch's autograd of
  // cross_entropy (the module's loss method), halved.
  auto ga = (*plain)->gradients(), gb = (*own)->gradients();
  for (std::size_t i = 0; i < ga.size(); ++i) EXPECT_NEAR(gb[i], 2.0f * ga[i], 1e-6f) << i;
}

TEST(torchscript_backend, emb_gradient_becomes_the_tables_sparse_gradient) {
  auto b = load_torchscript(options("sparse", 2, 2, 3));
  ASSERT_TRUE(b) << b.err().to_string();
  auto& be = **b;
  ASSERT_EQ(be.embedding_tables().size(), 1u);
  auto* t = be.embedding_tables()[0];
  EXPECT_EQ(t->dim(), 4u);
  EXPECT_EQ(be.output_width(), 1u);
  nn::dataset d;
  d.info = {"ctr", 2, 3, 2, {}, 0};
  d.rows = 4;
  d.dense = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
  d.sparse = {1, 2, 3, 1, 5, 6, 7, 8, 9, 1, 2, 3};
  d.labels = {1, 0, 1, 0};
  nn::batch all(d, 0, 4);
  EXPECT_EQ(be.batch_ids(all, 0), (std::vector<std::uint64_t>{1, 2, 3, 5, 6, 7, 8, 9}));
  // Rows written into the table (a PS pull) are what forward sees.
  std::vector<float> zeros(4, 0.0f);
  for (std::uint64_t id : be.batch_ids(all, 0)) t->write_rows(std::span(&id, 1), zeros.data());
  ASSERT_TRUE(be.compute_gradients(all));
  const auto& g = t->grad();
  EXPECT_EQ(g.size(), 8u) << "one combined row per distinct id";
  // emb.sum() is in the logit: every row's gradient is nonzero; id 1 (three occurrences) sums them.
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NE(g.row(i)[0], 0.0f) << "id " << g.ids[i];
  ASSERT_TRUE(be.predict(all));
  EXPECT_EQ(be.probabilities().size(), 4u);
}

TEST(torchscript_backend, errors_name_the_file_and_the_problem) {
  EXPECT_NE(error_of(options("missing")).find("missing.pt: no such file"), std::string::npos);
  EXPECT_NE(error_of(options("garbage")).find("garbage.pt: not a TorchScript archive"), std::string::npos);
  // An op of a newer torch: libtorch's message starts with a newline, and the cause read as "".
  auto newer = error_of(options("newer_op"));
  EXPECT_NE(newer.find("newer_op.pt: a TorchScript archive this libtorch (1.13"), std::string::npos) << newer;
  EXPECT_NE(newer.find("Unknown builtin op: aten::linear_v2"), std::string::npos) << newer;
  auto two = error_of(options("two_inputs"));
  EXPECT_NE(two.find("forward(a, b) takes 2 inputs; the data has dense features only: forward(dense)"),
            std::string::npos)
      << two;
  auto sparse = error_of(options("dense", 4, 3, 2));
  EXPECT_NE(sparse.find("forward(dense) takes 1 inputs; the data has sparse fields: forward(dense, emb)"),
            std::string::npos)
      << sparse;
  auto wide = error_of(options("wide"));
  EXPECT_NE(wide.find("logits of shape [2, 7]"), std::string::npos) << wide;
  EXPECT_NE(wide.find("3 classes, so the logits need 3 columns"), std::string::npos) << wide;
  auto counter = error_of(options("counter"));
  EXPECT_NE(counter.find("parameter 'count' is Long"), std::string::npos) << counter;
  auto inside = error_of(options("fails_inside"));
  EXPECT_NE(inside.find("fails_inside.pt: forward failed on inputs dense [2, 4]"), std::string::npos)
      << inside;
  // One line: libtorch's cause and where in the module (its traceback took a dozen lines).
  EXPECT_EQ(inside.find('\n'), std::string::npos) << inside;
  EXPECT_NE(inside.find("RuntimeError: shape '[-1, 5]' is invalid for input of size 8"), std::string::npos)
      << inside;
  EXPECT_NE(inside.find(", in forward: "), std::string::npos) << inside;
  EXPECT_NE(inside.find("reshape"), std::string::npos) << inside;
  auto o = options("dense");
  o.device = "gpu";
  EXPECT_NE(error_of(o).find("this build's libtorch has no CUDA"), std::string::npos);
  o.device = "tpu";
  EXPECT_NE(error_of(o).find("runs on cpu or gpu"), std::string::npos);
}

// The GPU's path (the module on its own memory, the host buffers a mirror: parameters and buffers
// up before a forward, gradients and buffers down after) taken on the CPU: training, evaluation and
// what a replica writes into parameters() and buffers() give the same bits as the aliased module.
void expect_same_training(const std::string& module, std::size_t dense_dim, std::size_t classes,
                          std::size_t fields, const nn::dataset& d) {
  auto o = options(module, dense_dim, classes, fields);
  auto plain = load_torchscript(o);
  o.device = "cpu-mirror";
  auto mirror = load_torchscript(o);
  ASSERT_TRUE(plain && mirror) << (plain ? mirror.err() : plain.err()).to_string();
  auto& a = **plain;
  auto& b = **mirror;
  ASSERT_EQ(a.buffers().size(), b.buffers().size());
  for (std::size_t s = 0; s < 12; ++s) {
    nn::batch batch(d, (s * 8) % (d.rows - 8), 8);
    auto la = a.step(batch);
    auto lb = b.step(batch);
    ASSERT_TRUE(la && lb);
    EXPECT_EQ(*la, *lb) << "step " << s;
  }
  EXPECT_TRUE(std::equal(a.parameters().begin(), a.parameters().end(), b.parameters().begin()));
  EXPECT_TRUE(std::equal(a.gradients().begin(), a.gradients().end(), b.gradients().begin()));
  for (std::size_t i = 0; i < a.buffers().size(); ++i)
    EXPECT_TRUE(std::equal(a.buffers()[i].begin(), a.buffers()[i].end(), b.buffers()[i].begin())) << i;
  nn::batch all(d, 0, d.rows);
  ASSERT_TRUE(a.predict(all) && b.predict(all));
  EXPECT_TRUE(std::equal(a.probabilities().begin(), a.probabilities().end(), b.probabilities().begin()));
  // A replica's write into the host buffers reaches the device copy.
  std::fill(b.parameters().begin(), b.parameters().end(), 0.0f);
  for (auto buf : b.buffers()) std::fill(buf.begin(), buf.end(), 1.0f);
  std::vector<float> zeros(o.embedding_dim, 0.0f);
  for (auto* t : b.embedding_tables())
    for (std::uint64_t id : b.batch_ids(all, 0)) t->write_rows(std::span(&id, 1), zeros.data());
  ASSERT_TRUE(b.predict(all));
  for (float p : b.probabilities()) EXPECT_NEAR(p, classes == 2 ? 0.5f : 1.0f / classes, 1e-6f);
}

TEST(torchscript_backend, the_gpu_path_on_the_cpu_trains_to_the_same_bits) {
  expect_same_training("dense", 4, 3, 0, blobs());
  expect_same_training("normed", 4, 3, 0, blobs());
  nn::dataset d;
  d.info = {"ctr", 2, 3, 2, {}, 0};
  d.rows = 32;
  std::mt19937 rng(5);
  for (std::size_t i = 0; i < d.rows; ++i) {
    d.dense.push_back(static_cast<float>(i % 7) / 7);
    d.dense.push_back(static_cast<float>(i % 3) / 3);
    for (int f = 0; f < 3; ++f) d.sparse.push_back(rng() % 20);
    d.labels.push_back(static_cast<float>(i % 2));
  }
  expect_same_training("sparse", 2, 2, 3, d);
}

TEST(torchscript_backend, a_batch_that_fails_later_is_an_error_not_an_exception) {
  auto b = load_torchscript(options("dense"));
  ASSERT_TRUE(b);
  nn::dataset d = blobs(6);
  for (auto& l : d.labels) l = 7;  // no such class: nll_loss throws inside libtorch
  auto r = (*b)->compute_gradients(nn::batch(d, 0, 6));
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("failed on inputs dense [6, 4]"), std::string::npos)
      << r.err().to_string();
}

}  // namespace
}  // namespace troupe::actors
