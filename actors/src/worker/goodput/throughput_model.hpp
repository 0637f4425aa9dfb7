// Pollux's throughput model and goodput-optimal batch (Qiao et al., OSDI '21), ported from
// bench/goodput/pollux_policy.py (itself from the artifact's simulator/goodput.py), for a job that
// picks its own batch (`[train] batch = "auto"`, docs/goodput.md).
//
// Per optimizer step of synchronous data parallelism over R replicas on N hosts:
//   T_compute(b) = alpha_c + beta_c b                     b: one replica's atomic (micro-)batch
//   T_network    = alpha_n + beta_n max(R - 2, 0)         R > 1 replicas on N > 1 hosts
//                = alpha_r + beta_r max(R - 2, 0)         R > 1 replicas on one host
//                = 0                                      R = 1
//   T_sync       = (T_compute^gamma + T_network^gamma)^(1/gamma)    gamma in [1, 10]: overlap
//   T_step       = s T_compute + T_sync                   s gradient-accumulation micro-batches
// and a step trains R b (s + 1) samples. Goodput = throughput x the statistical efficiency of that
// global batch (noise_scale::efficiency).
//
// The fit minimises Pollux's objective (RMS log error of compute and of sync-step times, plus its
// small priors) with the parameters the data cannot show pinned as Pollux pins them; Pollux uses
// scipy's L-BFGS-B, troupe projected Adam on the logarithms of the times (tests compare the two on
// the same data: bench/goodput/test_throughput_fit.py writes the reference).
//
// Values only; deterministic (same observations, same result, to the bit).
#pragma once

#include <cstddef>
#include <vector>

#include "noise_scale.hpp"

namespace troupe::actors::goodput {

struct perf_params {
  double alpha_c = 0, beta_c = 0, alpha_n = 0, beta_n = 0, alpha_r = 0, beta_r = 0, gamma = 1;
};

// Seconds of one atomic batch's forward and backward on one replica.
double compute_time(const perf_params& p, double atomic);
// Seconds of the gradient allreduce, before overlap with compute.
double network_time(const perf_params& p, int hosts, int replicas);
// Seconds per optimizer step (accum extra micro-batches before the synchronising one).
double step_time(const perf_params& p, int hosts, int replicas, double atomic, int accum = 0);
// Samples per second.
double throughput(const perf_params& p, int hosts, int replicas, double atomic, int accum = 0);
// Throughput x efficiency: base-batch-equivalent samples per second.
double goodput(const perf_params& p, const noise_scale& g, int hosts, int replicas, double atomic,
               int accum = 0);

// A measured configuration: the mean seconds of one atomic batch's compute, and of the
// synchronising micro-step (its compute, the allreduce and the optimizer step).
struct observation {
  int hosts = 1, replicas = 1;
  double atomic = 0;
  double compute = 0, sync = 0;
};

// Fits the model to observations (one per configuration, or several: all count). Empty: a model
// that predicts nothing (all zero).
perf_params fit(const std::vector<observation>& obs);

struct batch_limits {
  double max_batch = 0;   // the largest global batch ([train] max_batch)
  double max_atomic = 0;  // the largest micro-batch a replica computes at once ([train] max_local_batch)
  double max_local = 0;   // the largest batch one replica takes per step (records_per_task); 0: none
  double min_atomic = 1;
  // The largest micro-batch the fitted compute time is trusted for (the controller: twice the
  // largest measured); a larger local batch is accumulated in micro-batches no larger. 0: no bound.
  double max_trusted_atomic = 0;
};

struct batch_choice {
  double goodput = 0;
  int atomic = 0, accum = 0;  // per replica: accum + 1 micro-batches of atomic samples a step
};

// The goodput-optimal batch for `replicas` on `hosts` over 50 geometric global batch sizes in
// [max(M0, min_atomic replicas), max_batch], as Pollux searches; a local batch above max_atomic is
// split into accumulation steps (a lone replica above M0 accumulates at least once, as Pollux's
// does, so its statistics come from two batches of one step).
batch_choice best_batch(const perf_params& p, const noise_scale& g, int hosts, int replicas,
                        const batch_limits& lim);

}  // namespace troupe::actors::goodput
