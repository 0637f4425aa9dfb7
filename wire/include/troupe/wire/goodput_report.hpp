// What a worker's strategy measured about its gradients and its speed (docs/goodput.md), in one C++
// shape: the worker sends it with its progress (WorkerProgress.goodput), the master keeps the latest
// of the ring's rank 0 and relays it in the job's status (JobStatus.goodput, `troupe status --json`
// "goodput"), its metrics and its timeline. The Cap'n Proto translation is in status_codec.hpp.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace troupe::wire {

// Pollux's throughput model (docs/goodput.md): seconds of compute and of the allreduce.
struct throughput_model {
  double alpha_c = 0, beta_c = 0, alpha_n = 0, beta_n = 0, alpha_r = 0, beta_r = 0, gamma = 1;
};

struct goodput_report {
  bool valid = false;  // false: the strategy measures nothing (the message has no goodput)
  std::uint32_t ring_rank = 0, replicas = 1, hosts = 1;
  std::uint32_t base_batch = 0;  // M0: the job file's workers x batch_size
  double grad_sqr = 0;           // EMA of |G|^2 (Adam: of the preconditioned gradient)
  double grad_var = 0;           // EMA of tr(Sigma) / M0
  double noise_scale = 0;        // tr(Sigma) / |G|^2 in samples; 0 before the first estimate, infinite
                                 // while |G|^2 sits at its floor 0 (JSON: null, noise_scale_infinite)
  std::uint64_t rounds = 0;      // estimates in the averages
  std::string lr_scaling;        // the [train] lr_scaling rule
  double lr_factor = 1;          // the learning rate's multiple at the last step
  double gain = 1;               // AdaScale's r(S) at the current scale
  double progress = 0;           // scale-invariant steps (sum of r times each step's share)
  std::uint32_t batch = 0, local_batch = 0, accum_steps = 0;  // global; one micro-batch; extra micro-batches
  double compute_seconds = 0, step_seconds = 0;               // means measured at the current configuration
  double throughput = 0;         // samples/s measured since the latest batch choice (or the start)
  double goodput = 0;            // throughput x efficiency(batch), base-batch samples/s
  double predicted_goodput = 0;  // the model's for the current batch
  throughput_model model;
  std::uint32_t choice = 0;                        // batch choices so far
  std::uint32_t choice_from = 0;                   // the global batch before the latest choice
  double choice_predicted = 0, choice_before = 0;  // predicted goodput of the choice / of what it replaced
  double choice_measured = 0;                      // measured goodput at the chosen batch; 0 until measured
  std::uint32_t push_shards = 0;  // async_ps: the PS shards whose push estimates are summed; 0: the worker's
  // The latest choice as made: its global batch at the ring it was made for (the batch in force is that
  // choice's local batch times the current ring), and the scale-invariant step it was made at.
  std::uint32_t choice_batch = 0, choice_replicas = 0;
  double choice_progress = 0;
};

// `troupe status --json` "goodput": {ring_rank, replicas, hosts, base_batch, grad_sqr, grad_var,
// noise_scale, rounds, lr_scaling, lr_factor, gain, progress, batch, local_batch, accum_steps,
// compute_seconds, step_seconds, throughput, goodput, predicted_goodput, model{alpha_c, beta_c,
// alpha_n, beta_n, alpha_r, beta_r, gamma}, choice, choice_from, choice_predicted, choice_before,
// choice_measured, push_shards, choice_batch, choice_replicas, choice_progress}.
nlohmann::json to_json(const goodput_report& g);

}  // namespace troupe::wire
