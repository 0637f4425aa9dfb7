// The job-file sections nn owns, as typed structs read with troupe::config_reader:
//
//   [model]  type = "lr" | "mlp" | "cnn" | "wide_deep" | "deepfm" | "sequential" (or any
//            registered type), hidden = [256, 128], embedding_dim, embedding_scale, dropout,
//            filters = [32, 64], cnn_dropout, layers = ["flatten", "dense:10"]
//   [train]  epochs, batch_size, optimizer = "sgd" | "adagrad" | "adam", learning_rate,
//            momentum, nesterov, initial_accumulator, beta1, beta2, epsilon, weight_decay,
//            seed, log_every, shuffle, eval_batch_size, threads, device = "cpu" | "gpu",
//            max_samples_per_s (per worker of a job; 0: unlimited), noise_scale, noise_scale_every,
//            lr_scaling = "none" | "linear" | "sqrt" | "adascale", batch = "fixed" | "auto" | "global",
//            max_batch, max_local_batch (docs/goodput.md)
//   [data]   source = "fashion-mnist" | "criteo" | "synthetic-ctr" | "store" and that source's keys:
//            fashion-mnist: dir, max_train_rows, max_test_rows
//            criteo:        train, test (optional), test_fraction, buckets_per_field,
//                           max_train_rows, max_test_rows
//            store:         train, test (record store directories made by `troupe data`, relative
//                           to the job file (job::read_job_file); read by `troupe run` and
//                           `troupe train --local`; docs/data.md)
//            synthetic-ctr: rows, test_rows, fields, vocab_per_field, zipf_exponent, dense_dim,
//                           factor_dim, weight_scale, factor_scale, bias, model_seed, sample_seed
// Each reader records problems in the config_reader (first one wins; the caller's finish()
// reports it with file, line and key).
#pragma once

#include <string>

#include "troupe/core/config.hpp"
#include "troupe/nn/data/readers.hpp"
#include "troupe/nn/model.hpp"
#include "troupe/nn/trainer.hpp"

namespace troupe::nn {

struct data_config {
  std::string source = "fashion-mnist";
  std::string dir = fashion_mnist_default_dir;  // fashion-mnist
  std::size_t max_train_rows = 0, max_test_rows = 0;
  std::string train_path, test_path;  // criteo (files), store (record store directories)
  double test_fraction = 0.1;         // criteo without a test file: the last rows are held out
  criteo_options criteo;
  synthetic_ctr_options synthetic;  // rows = training rows
  std::size_t test_rows = 10000;    // synthetic-ctr: rows of the test set (sample_seed + 1)
  // Where a job's workers read records (docs/data.md, "Served records"): "auto" from the local store
  // when this host has it, else from the master node's record server; "always" from the server;
  // "never" only locally (a host without the store fails).
  std::string serve = "auto";
  std::size_t cache_mb = 256;  // per worker: served tasks kept in memory for their next lease
  // Tasks pushed out of that memory go to a local LMDB file under spill_dir (empty: the system's
  // temp dir + "/troupe-record-cache-<uid>", made 0700), shared by this user's workers of this host, up to
  // spill_mb (0: off). A directory another user owns or may write in is not used (a warning).
  std::size_t spill_mb = 0;
  std::string spill_dir;
};

struct job_config {
  model_config model;
  train_config train;
  data_config data;
};

model_config read_model_config(config_section s, model_config defaults = {});
train_config read_train_config(config_section s, train_config defaults = {});
data_config read_data_config(config_section s, data_config defaults = {});

// Reads [model], [train] and [data] of `r` (model.seed defaults to train.seed). Does not call
// finish(): the caller may read other sections first.
job_config read_job_config(config_reader& r);

// Reads a whole job document that holds only these sections (and [log]); the first problem
// (including unknown keys) is the error.
expected<job_config> load_job_config(const config_doc& doc);

struct train_test {
  dataset train, test;
  double true_auc = 0;  // synthetic-ctr: the planted model's AUC on the test set (0 otherwise)
  double true_logloss = 0;
};

// Loads the data a data_config names; errors name the file/record (see readers.hpp).
expected<train_test> load_data(const data_config& c);

}  // namespace troupe::nn
