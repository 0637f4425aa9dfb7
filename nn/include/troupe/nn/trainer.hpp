// Single-process training: a model, an optimizer and its state (dense slots per parameter,
// row slots per embedding table), minibatch steps, epochs and evaluation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/nn/data/dataset.hpp"
#include "troupe/nn/metrics.hpp"
#include "troupe/nn/model.hpp"
#include "troupe/nn/optimizer.hpp"

namespace troupe::nn {

struct train_config {
  std::size_t epochs = 1;
  std::size_t batch_size = 64;
  optimizer_config optimizer;
  std::uint64_t seed = 1;       // model init, shuffling, dropout
  std::size_t log_every = 100;  // steps between progress callbacks (0: never)
  bool shuffle = true;          // reshuffle the training rows every epoch
  std::size_t eval_batch_size = 1024;
  int threads = 1;             // OpenBLAS threads (0: leave OpenBLAS' default)
  std::string device = "cpu";  // "gpu": `troupe train --local` trains on CUDA device 0 (docs/gpu.md)
  // A worker of a troupe job trains at most this many samples per second (0: as fast as it can):
  // a job that must leave CPU to others, and the cluster experiments' stand-in for a Slurm CPU on
  // a machine with fewer real cores (docs/cluster_experiments.md).
  double max_samples_per_s = 0;
  // Goodput (docs/goodput.md; the allreduce strategy): whether the ring estimates the gradient noise
  // scale in its allreduce; the learning rate's rule when the global batch is not the job file's
  // (workers x batch_size): "none", "linear", "sqrt" or "adascale" (AdaScale's gain; with Adam and
  // Adagrad its square root); and the batch: "fixed" (batch_size per worker) or "auto" (the
  // goodput-optimal global batch up to max_batch, in micro-batches of at most max_local_batch with
  // gradient accumulation beyond that) or "global" (the job file's global batch at every ring size).
  // 0: max_batch 16 x the job file's global batch.
  bool noise_scale = true;
  // The squared gradient norms on 1 step in this many (1: every step, as Pollux): their cost is
  // that of an extra pass over the gradient (and Adam's preconditioner) on the steps that compute
  // them; the estimate's moving averages keep their time constant (docs/goodput.md, "Cost").
  std::size_t noise_scale_every = 8;
  std::string lr_scaling = "none";
  std::string batch = "fixed";
  std::size_t max_batch = 0;
  std::size_t max_local_batch = 1024;
};

struct progress {
  std::size_t epoch = 0, step = 0, steps_per_epoch = 0;
  double loss = 0;           // mean training loss since the last report
  double samples_per_s = 0;  // since the last report
};

class trainer {
 public:
  // Fails with bad_config on a bad optimizer configuration.
  static expected<std::unique_ptr<trainer>> create(model& m, const train_config& config);

  // One minibatch: forward (training), backward, optimizer update. Returns the batch loss.
  expected<float> step(const batch& b);
  // step() in two halves, for strategies that combine gradients in between (sync allreduce):
  // forward (training) + backward, then the optimizer update of the gradients now in the model,
  // at `lr_scale` times the learning rate (a synchronous round with fewer samples than a full one).
  expected<float> compute_gradients(const batch& b);
  void apply_gradients(double lr_scale = 1.0);
  // The trainable dense parameters and their optimizer state, index for index (strategies that
  // synchronise replicas copy both).
  const std::vector<dense_param*>& trainable_parameters() const { return params_; }
  std::vector<dense_slots>& dense_state() { return dense_state_; }
  // One pass over `data` in batches (shuffled when configured); calls `report` every log_every
  // steps. Returns the mean loss.
  expected<double> train_epoch(const dataset& data, const std::function<void(const progress&)>& report = {});
  expected<eval_result> evaluate(const dataset& data);

  model& get_model() { return model_; }
  const optimizer& get_optimizer() const { return *opt_; }
  std::size_t epoch() const { return epoch_; }
  std::uint64_t steps() const { return steps_; }

 private:
  trainer(model& m, const train_config& c, std::unique_ptr<optimizer> opt);
  model& model_;
  train_config config_;
  std::unique_ptr<optimizer> opt_;
  std::vector<dense_param*> params_;
  std::vector<dense_slots> dense_state_;
  std::vector<embedding_table*> tables_;
  std::vector<row_slots> row_state_;
  std::vector<std::uint32_t> order_;
  std::vector<float> scores_;
  std::size_t epoch_ = 0;
  std::uint64_t steps_ = 0;
};

}  // namespace troupe::nn
