// A synchronous job's goodput controller (docs/goodput.md): what a ring strategy (allreduce) does with
// the gradient noise scale it measures in its own allreduce. Per step:
//   - each rank adds its part of the estimate (its micro-batches' squared gradient norms, its compute
//     and step times, whether it entered a new data epoch) to the round's buffer: `vote_floats` more
//     floats after the round vote, summed by the same allreduce that sums the gradients;
//   - rank 0 also writes the learning-rate gain of this step and the batch in force from the next
//     step on (rank 0's word: every other rank writes 0 there, so the sum is rank 0's value and the
//     replicas cannot disagree even if their controllers did);
//   - after the allreduce every rank adds the round to its noise_scale (the same sums in the same
//     order: the same state on every rank) and its throughput observations.
// The squared norms are computed on 1 round in `estimate_every` ([train] noise_scale_every): rank 0
// says in each round's vote whether the next round computes them, so every rank computes them on the
// same rounds (a rank that disagrees, just joined, makes the round count for nothing: the estimate
// needs every rank's norms). Each estimate then stands for estimate_every rounds in the moving
// averages (noise_scale::add's `rounds`), which keep their time constant in steps.
// The learning rate of a step is multiplied by the rule's factor at the scale S = the step's global
// batch / M0 (M0 = the job file's workers x batch_size): "none" 1, "linear" S, "sqrt" sqrt(S),
// "adascale" AdaScale's gain r(S) (for Adam and Adagrad r(S)^0.5, AdaptDL's AdamScale). The
// scale-invariant step count advances by r(S) times the round's share of a full step.
// With `auto_batch`, rank 0 picks the goodput-optimal batch (throughput_model.hpp) at every resize
// (a fresh ring), when a rank enters a new data epoch, and once when the estimates are first usable;
// the change is made only when it gains at least 5% predicted goodput.
// With `global_batch` ([train] batch = "global") the global batch stays the job file's M0 whatever
// the ring's size (strong scaling): rank 0 sets each replica's batch to ceil(M0 / ranks) when the
// ring changes (micro-batches of at most max_local_batch beyond), so the learning rate's scale
// stays 1 and no rule is needed; the throughput model is fitted at each change for the report.
//
// The whole state travels with a replica resync (sync_floats): a new rank continues the most trained
// replica's estimates, observations and batch.
//
// Threads: the worker's thread only. No I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "noise_scale.hpp"
#include "throughput_model.hpp"
#include "troupe/wire/goodput_report.hpp"

namespace troupe::actors::goodput {

enum class lr_rule { none, linear, sqrt, adascale };
// "none", "linear", "sqrt", "adascale" (nullopt-like: none for anything else).
lr_rule parse_lr_rule(const std::string& s);
const char* to_string(lr_rule r);

struct controller_options {
  lr_rule rule = lr_rule::none;
  bool adaptive = false;             // Adam or Adagrad: AdaScale's gain to the power 0.5
  bool auto_batch = false;           // [train] batch = "auto"
  bool global_batch = false;         // [train] batch = "global": M0 at every ring size
  double base_batch = 64;            // M0: the job file's workers x batch_size
  std::size_t batch_size = 64;       // [train] batch_size: one replica's batch while the batch is fixed
  batch_limits limits;               // auto batch: max_batch, max_local_batch, records_per_task
  std::uint64_t warm_rounds = 30;    // estimates before the first choice (4x while |G|^2 is 0)
  double min_gain = 1.05;            // a new batch must promise this much more goodput
  std::uint32_t estimate_every = 8;  // the squared norms on 1 round in this many (1: every round)
};

// One step's configuration: each replica computes accum + 1 micro-batches of `atomic` samples.
struct batch_config {
  int atomic = 0, accum = 0;
  int local() const { return atomic * (accum + 1); }
  bool operator==(const batch_config&) const = default;
};

class controller {
 public:
  static constexpr std::size_t vote_floats = 12;
  static constexpr std::size_t max_observations = 16;
  static constexpr std::size_t sync_header = 13;  // after the estimator's state; then the observations
  static constexpr std::size_t sync_floats = noise_scale::state_floats + sync_header + max_observations * 6;

  explicit controller(controller_options o);

  const controller_options& options() const { return opt_; }
  // The batch in force: what the worker cuts per step (local()) and how the strategy splits it.
  const batch_config& batch() const { return cur_; }
  const noise_scale& noise() const { return ns_; }
  // Whether this step computes the squared gradient norms (the first step does; then 1 round in
  // estimate_every, and the round after a due one that added nothing: a rank's batch short of the
  // full size, or alone, no pair. Without the retry a task's batch pattern that repeats with the
  // period of estimate_every can hide every due round: 2,000-record tasks cut in 512s are 3 full
  // batches and a short one, every 4th round, and with norms on every 8th the estimate froze).
  bool norms_due() const { return norms_due_; }

  // This rank's contribution to the step's round. `small_sqr`: the mean over its micro-batches of
  // their squared gradient norms (none on a round that computes no norms), counted only when `full`
  // (every micro-batch had `atomic` samples); `compute_s`: seconds of one micro-batch (full only);
  // `epoch`: the data epoch of its task. `ranks`: the ring's size; `rank`: this rank's place in it.
  void cast(std::span<float> at, int rank, int ranks, bool full, std::optional<double> small_sqr,
            double compute_s, std::uint32_t epoch);

  // What the round says, read by every rank after the allreduce.
  struct round {
    double gain = 1;       // rank 0's r(S) for this step
    double lr_factor = 1;  // the rule's factor (times the caller's share of a full step)
    bool config_changed = false;
  };
  // `big_sqr`: |mean gradient|^2 (the same preconditioner as the ranks' small ones); `share`: the
  // round's samples over a full round (replicas::step_share); `samples`: the round's samples.
  // `fresh`: the ring was (re)built for this step; `hosts`: hosts the ring spans.
  // `now_s`: seconds on the worker's clock (measured throughput).
  round read(std::span<const float> at, int rank, int ranks, int hosts, double big_sqr, double share,
             double samples, bool fresh, double now_s);
  // After the optimizer step: this rank's seconds for the whole step (micro-batches, allreduce,
  // optimizer); it goes into the next round's vote.
  void step_done(double seconds, bool full);

  // A ring of one: the estimate from this step's micro-batches (accum > 0) or from this step and the
  // previous one (`pair`: b_small = the step's samples, biased), then the same bookkeeping as read().
  // `small_sqr` none: the step computed no norms.
  round alone(bool full, std::optional<double> small_sqr, double big_sqr, bool pair, double compute_s,
              double share, double samples, std::uint32_t epoch, bool fresh, double now_s);

  // The norms are now of Adam's preconditioned gradient: estimates of the plain one start over (the
  // two do not mix). The kind travels with the state, so a rank that joins a ring whose estimates are
  // already preconditioned keeps the ones it received.
  void norms_preconditioned() {
    if (!std::exchange(preconditioned_, true)) ns_.reset();
  }

  // batch = "global": each of `ranks` replicas' share of M0 (ceil), in micro-batches of at most
  // max_atomic.
  batch_config global_share(int ranks) const;
  // `global` shared by `ranks` replicas (ceil with `up`, else floor; at least limits.min_atomic
  // each), in micro-batches of at most max_atomic.
  batch_config share(double global, int ranks, bool up) const;

  // The whole state, for a resync (sync_floats).
  void pack(std::span<float> out) const;
  std::vector<float> packed() const;  // pack() into sync_floats of its own (a resync's, a checkpoint's)
  void unpack(std::span<const float> in);

  // What the worker reports (wire::goodput_report); `rank`, `ranks`, `hosts` of the current ring.
  // Its lr_factor is the rule's factor of the last full step: a task's short last batch scales its
  // step's rate by its share (the report said 0.04 for a job at x1.5 whose last step had 5 rows).
  wire::goodput_report report() const;

 private:
  struct obs_entry {
    observation o;
    double count = 0;
  };
  double rule_factor(double gain, double scale) const;
  double scale_of(const batch_config& c, int ranks) const;
  void observe(int hosts, int ranks, const batch_config& c, double compute, double sync);
  void maybe_choose(int hosts, int ranks, bool fresh, bool new_epoch);
  // The choice itself, once the estimate is usable: the fitted model's best batch, proposed when it
  // promises min_gain more than the batch in force (anything, when that one is `outside` the range).
  void choose(int hosts, int ranks, bool outside);
  void keep_global_batch(int ranks);
  void propose_choice(int ranks, double predicted, double before);
  // `b` proposed for the next round, unless it is the batch in force.
  void propose(const batch_config& b, int ranks, double predicted, double before);
  void count_round(double samples, double gain, double share, double now_s);
  void adopt(const batch_config& c, std::uint32_t seq);
  void count_norms_round(bool alone);

  controller_options opt_;
  noise_scale ns_;
  batch_config cur_, proposed_;
  std::uint32_t seq_ = 0, proposed_seq_ = 0;
  std::uint32_t epoch_ = 0;  // the highest data epoch a round has reported
  double progress_ = 0;      // scale-invariant steps
  double last_gain_ = 1, last_factor_ = 1;
  int ranks_ = 1, hosts_ = 1;
  bool chosen_once_ = false;
  bool choice_due_ = false;      // a resize or a new epoch since the last choice, made once usable
  bool preconditioned_ = false;  // the estimates are of Adam's preconditioned gradient
  std::uint64_t rounds_ = 0;     // rounds read (or alone) so far: which ones compute the norms
  bool norms_due_ = true;
  bool missed_ = false;  // the last due round added nothing: the next one computes the norms again
  std::vector<obs_entry> obs_;
  // This rank's step time, for the next round (keyed by the configuration it ran).
  double pending_step_s_ = 0;
  bool pending_full_ = false;
  // A batch choice as proposed (proposed_choice_, by every rank from the same state) and as adopted
  // with its seq (choice_): the global batch it replaced, the ring it was made for, its predicted
  // goodput and that of the batch it replaced, and the scale-invariant step it was made at (rounded
  // to a float as the state keeps it: what tells it from another choice of the same seq, below).
  struct choice_made {
    std::uint32_t from = 0, replicas = 0;
    double predicted = 0, before = 0, at_progress = 0;
  };
  choice_made choice_, proposed_choice_;
  // Since the latest choice: what was measured.
  double choice_measured_ = 0;
  double since_samples_ = 0, since_steps_ = 0;
  double since_s_ = -1;  // when the measurement began (the caller's clock); < 0: at the next round
  double measured_throughput_ = 0;
  perf_params perf_;
};

}  // namespace troupe::actors::goodput
