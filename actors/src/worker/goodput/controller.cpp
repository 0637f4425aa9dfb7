#include "controller.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::actors::goodput {

namespace {
// The vote's slots (controller::vote_floats), after the round vote.
enum slot : std::size_t {
  small_sqr_sum,  // sum over full ranks of their micro-batches' mean squared gradient norm
  full_ranks,     // ranks whose every micro-batch was full
  compute_sum,    // sum of full ranks' seconds per micro-batch
  computed,       // ranks that timed a micro-batch
  step_sum,       // sum of the previous step's seconds (ranks whose previous step was full)
  timed,          // ranks that timed their previous step
  new_epoch,      // ranks whose task is of a data epoch past the controller's
  gain,           // rank 0's r(S) for this step
  atomic,         // rank 0's batch in force from the next step
  accum,
  seq,
  norms_next,  // rank 0's word: the next round computes the squared norms
};
static_assert(slot::norms_next + 1 == controller::vote_floats);

constexpr std::uint32_t measure_after_steps =
    20;  // a choice's goodput is measured over this many steps first
// A choice's micro-batch is at most this times the largest one measured: the compute time's fit
// (with one size seen, Pollux's pin: half of it fixed) is extrapolated no further. Larger local
// batches accumulate micro-batches of that size; the next choice (an epoch later) may go further.
constexpr double trust_factor = 2.0;
}  // namespace

lr_rule parse_lr_rule(const std::string& s) {
  if (s == "linear") return lr_rule::linear;
  if (s == "sqrt") return lr_rule::sqrt;
  if (s == "adascale") return lr_rule::adascale;
  return lr_rule::none;
}

const char* to_string(lr_rule r) {
  switch (r) {
    case lr_rule::linear:
      return "linear";
    case lr_rule::sqrt:
      return "sqrt";
    case lr_rule::adascale:
      return "adascale";
    case lr_rule::none:
      break;
  }
  return "none";
}

controller::controller(controller_options o) : opt_(o), ns_(o.base_batch) {
  opt_.estimate_every = std::max<std::uint32_t>(1, opt_.estimate_every);
  cur_ = {static_cast<int>(std::max<std::size_t>(1, o.batch_size)), 0};
  proposed_ = cur_;
}

double controller::scale_of(const batch_config& c, int ranks) const {
  return static_cast<double>(ranks) * c.local() / ns_.base_batch();
}

double controller::rule_factor(double g, double scale) const {
  switch (opt_.rule) {
    case lr_rule::linear:
      return scale;
    case lr_rule::sqrt:
      return std::sqrt(scale);
    case lr_rule::adascale:
      return opt_.adaptive ? std::sqrt(g) : g;
    case lr_rule::none:
      break;
  }
  return 1.0;
}

void controller::cast(std::span<float> at, int rank, int ranks, bool full, std::optional<double> small_sqr,
                      double compute_s, std::uint32_t epoch) {
  std::fill(at.begin(), at.begin() + vote_floats, 0.0f);
  if (full) {
    if (small_sqr) {
      at[small_sqr_sum] = static_cast<float>(*small_sqr);
      at[full_ranks] = 1.0f;
    }
    if (compute_s > 0) {
      at[compute_sum] = static_cast<float>(compute_s);
      at[computed] = 1.0f;
    }
  }
  if (pending_full_ && pending_step_s_ > 0) {
    at[step_sum] = static_cast<float>(pending_step_s_);
    at[timed] = 1.0f;
  }
  pending_full_ = false;
  at[new_epoch] = epoch > epoch_ ? 1.0f : 0.0f;
  if (rank != 0) return;
  at[gain] = static_cast<float>(ns_.gain(scale_of(cur_, ranks)));
  at[atomic] = static_cast<float>(proposed_.atomic);
  at[slot::accum] = static_cast<float>(proposed_.accum);
  at[seq] = static_cast<float>(proposed_seq_);
  at[norms_next] = missed_ || (rounds_ + 1) % opt_.estimate_every == 0 ? 1.0f : 0.0f;
}

void controller::count_norms_round(bool alone) {
  ++rounds_;
  if (alone) norms_due_ = missed_ || rounds_ % opt_.estimate_every == 0;
}

void controller::observe(int hosts, int ranks, const batch_config& c, double compute, double sync) {
  if (!(compute > 0) || !(sync > 0) || !std::isfinite(compute) || !std::isfinite(sync)) return;
  for (auto& e : obs_) {
    if (e.o.hosts == hosts && e.o.replicas == ranks && e.o.atomic == c.atomic) {
      // A running mean that forgets slowly (the machine's load moves): at most 200 steps' memory.
      e.count = std::min(e.count + 1, 200.0);
      e.o.compute += (compute - e.o.compute) / e.count;
      e.o.sync += (sync - e.o.sync) / e.count;
      return;
    }
  }
  if (obs_.size() == max_observations) obs_.erase(obs_.begin());
  obs_.push_back({{hosts, ranks, static_cast<double>(c.atomic), compute, sync}, 1});
}

void controller::adopt(const batch_config& c, std::uint32_t seq) {
  if (c.atomic <= 0) return;
  const bool changed = !(c == cur_);
  if (seq != seq_) choice_ = proposed_choice_;
  cur_ = proposed_ = c;
  seq_ = proposed_seq_ = seq;
  if (changed) {
    since_s_ = -1;
    since_samples_ = since_steps_ = 0;
    choice_measured_ = 0;
  }
}

void controller::count_round(double samples, double g, double share, double now_s) {
  progress_ += g * share;
  last_gain_ = g;
  if (since_s_ < 0) {
    since_s_ = now_s;  // the measurement starts at the end of this step
    return;
  }
  since_samples_ += samples;
  since_steps_ += 1;
  if (now_s > since_s_) measured_throughput_ = since_samples_ / (now_s - since_s_);
  if (seq_ > 0 && since_steps_ >= measure_after_steps)
    choice_measured_ = measured_throughput_ * ns_.efficiency(static_cast<double>(ranks_) * cur_.local());
}

void controller::maybe_choose(int hosts, int ranks, bool fresh, bool entered_epoch) {
  if (fresh || entered_epoch) choice_due_ = true;
  if (!opt_.auto_batch) return;
  // A choice waits for a usable estimate: warm_rounds of them, and a signal (while |G|^2 is at its
  // floor 0 every batch's efficiency is 1 and the choice would be max_batch on the estimate's noise
  // alone; after 4 x warm_rounds it goes ahead: a noise that hides the gradient for that long is the
  // estimate's answer). One due meanwhile (a resize, a new epoch) waits for it.
  const bool signal = ns_.sqr() > 0 || ns_.rounds() >= 4 * opt_.warm_rounds;
  const bool usable = ns_.ready() && ns_.rounds() >= opt_.warm_rounds && signal && !obs_.empty();
  // A resize can leave the batch outside the range the choice keeps to (3 x 43 shrunk to 1 x 43,
  // below M0; 2 x 64 grown to 4 x 64 past max_batch): there it is replaced whatever the gain (its
  // efficiency above 1 below M0 made it look better than any batch in range, and a shrunk job
  // trained below M0 to its end); without a usable estimate, by the nearest batch in range.
  const double global = static_cast<double>(ranks) * cur_.local();
  const double most = std::max(opt_.limits.max_batch, ns_.base_batch());
  const bool outside = global < ns_.base_batch() - 0.5 || global > most + 0.5;
  // A batch that rule set before any choice (seq_ > 0, none chosen) stands in for the job file's: at a
  // resize it is M0 shared anew, not kept per replica (a job that started on one worker, lifted to
  // M0, and grew to four trained 4 x M0 that no choice had to beat by min_gain). The choice stays due.
  if (fresh && seq_ > 0 && !chosen_once_) {
    propose(share(ns_.base_batch(), ranks, true), ranks, 0, 0);
    return;
  }
  if (outside && !usable) {
    propose(share(global < ns_.base_batch() ? ns_.base_batch() : most, ranks, global < ns_.base_batch()),
            ranks, 0, 0);
    return;
  }
  if (!usable || !(outside || choice_due_ || !chosen_once_)) return;
  choose(hosts, ranks, outside);
}

void controller::choose(int hosts, int ranks, bool outside) {
  chosen_once_ = true;
  choice_due_ = false;
  std::vector<observation> o;
  auto lim = opt_.limits;
  for (const auto& e : obs_) {
    o.push_back(e.o);
    lim.max_trusted_atomic = std::max(lim.max_trusted_atomic, trust_factor * e.o.atomic);
  }
  perf_ = fit(o);
  const auto best = best_batch(perf_, ns_, hosts, ranks, lim);
  const double now = goodput(perf_, ns_, hosts, ranks, cur_.atomic, cur_.accum);
  if (best.atomic <= 0 || !(outside || best.goodput >= opt_.min_gain * now)) return;
  propose({best.atomic, best.accum}, ranks, best.goodput, now);
}

void controller::propose(const batch_config& b, int ranks, double predicted, double before) {
  if (b == cur_) return;
  proposed_ = b;
  proposed_seq_ = seq_ + 1;
  propose_choice(ranks, predicted, before);
}

void controller::propose_choice(int ranks, double predicted, double before) {
  proposed_choice_ = {static_cast<std::uint32_t>(ranks * cur_.local()), static_cast<std::uint32_t>(ranks),
                      predicted, before, static_cast<float>(progress_)};
}

batch_config controller::global_share(int ranks) const {
  return share(ns_.base_batch(), ranks, true);
}

batch_config controller::share(double global, int ranks, bool up) const {
  const double each = global / std::max(1, ranks);
  const double local = std::max({1.0, opt_.limits.min_atomic, up ? std::ceil(each) : std::floor(each)});
  const double most = opt_.limits.max_atomic > 0 ? opt_.limits.max_atomic : local;
  const double parts = std::max(1.0, std::ceil(local / most));
  return {static_cast<int>(std::ceil(local / parts)), static_cast<int>(parts) - 1};
}

void controller::keep_global_batch(int ranks) {
  if (!opt_.global_batch) return;
  const auto b = global_share(ranks);
  if (b == proposed_) return;
  proposed_ = b;
  proposed_seq_ = seq_ + 1;
  propose_choice(ranks, 0, 0);
  std::vector<observation> o;
  for (const auto& e : obs_) o.push_back(e.o);
  if (!o.empty()) perf_ = fit(o);
}

controller::round controller::read(std::span<const float> at, int rank, int ranks, int hosts, double big_sqr,
                                   double share, double samples, bool fresh, double now_s) {
  (void)rank;
  round r;
  const int full = static_cast<int>(at[full_ranks]);
  const double every = opt_.estimate_every;
  bool added = false;
  if (ranks > 1 && full == ranks) {
    const double count = static_cast<double>(ranks) * (cur_.accum + 1);
    added = ns_.add(
        {at[small_sqr_sum] / ranks, big_sqr, static_cast<double>(cur_.atomic), count * cur_.atomic, every},
        false);
  }
  missed_ = norms_due_ && !added && samples > 0;
  norms_due_ = at[norms_next] > 0.5f;
  count_norms_round(false);
  if (fresh || ranks != ranks_ || hosts != hosts_) {
    since_s_ = -1;  // another ring: another throughput
    since_samples_ = since_steps_ = 0;
  } else if (at[computed] > 0 && at[timed] > 0) {
    const double compute = at[compute_sum] / at[computed];
    observe(hosts, ranks, cur_, compute, at[step_sum] / at[timed] - cur_.accum * compute);
  }
  ranks_ = ranks;
  hosts_ = hosts;
  r.gain = at[gain] > 0 ? at[gain] : 1.0;
  r.lr_factor = rule_factor(r.gain, scale_of(cur_, ranks));
  if (samples > 0 && share >= 1.0) last_factor_ = r.lr_factor;  // controller.hpp: report()
  const bool entered = at[new_epoch] > 0;
  if (entered) ++epoch_;
  const batch_config word{static_cast<int>(at[atomic]), static_cast<int>(at[slot::accum])};
  const auto word_seq = static_cast<std::uint32_t>(at[seq]);
  if (word.atomic > 0 && (word_seq != seq_ || !(word == cur_))) {
    adopt(word, word_seq);
    r.config_changed = true;
  }
  count_round(samples, r.gain, share, now_s);
  maybe_choose(hosts, ranks, fresh, entered);
  keep_global_batch(ranks);
  return r;
}

void controller::step_done(double seconds, bool full) {
  pending_step_s_ = seconds;
  pending_full_ = full && seconds > 0;
}

controller::round controller::alone(bool full, std::optional<double> small_sqr, double big_sqr, bool pair,
                                    double compute_s, double share, double samples, std::uint32_t epoch,
                                    bool fresh, double now_s) {
  round r;
  const double every = opt_.estimate_every;
  bool added = false;
  if (full && small_sqr && cur_.accum > 0)
    added = ns_.add(
        {*small_sqr, big_sqr, static_cast<double>(cur_.atomic), static_cast<double>(cur_.local()), every},
        false);
  else if (full && small_sqr && pair)
    added =
        ns_.add({*small_sqr, big_sqr, static_cast<double>(cur_.local()), 2.0 * cur_.local(), every}, true);
  missed_ = norms_due_ && !added && samples > 0;
  count_norms_round(true);
  if (fresh || ranks_ != 1 || hosts_ != 1) {
    since_s_ = -1;
    since_samples_ = since_steps_ = 0;
  } else if (full && compute_s > 0 && pending_full_) {
    observe(1, 1, cur_, compute_s, pending_step_s_ - cur_.accum * compute_s);
  }
  pending_full_ = false;
  ranks_ = hosts_ = 1;
  r.gain = ns_.gain(scale_of(cur_, 1));
  r.lr_factor = rule_factor(r.gain, scale_of(cur_, 1));
  if (samples > 0 && share >= 1.0) last_factor_ = r.lr_factor;  // controller.hpp: report()
  const bool entered = epoch > epoch_;
  if (entered) epoch_ = epoch;
  count_round(samples, r.gain, share, now_s);
  maybe_choose(1, 1, fresh, entered);
  keep_global_batch(1);
  if (!(proposed_ == cur_) || proposed_seq_ != seq_) {
    adopt(proposed_, proposed_seq_);
    r.config_changed = true;
  }
  return r;
}

wire::goodput_report controller::report() const {
  wire::goodput_report g;
  g.valid = true;
  g.replicas = static_cast<std::uint32_t>(ranks_);
  g.hosts = static_cast<std::uint32_t>(hosts_);
  g.base_batch = static_cast<std::uint32_t>(ns_.base_batch());
  g.grad_sqr = ns_.ready() ? ns_.sqr() : 0;
  g.grad_var = ns_.ready() ? ns_.var() : 0;
  g.noise_scale = ns_.noise_scale_samples();  // infinite once |G|^2 sits at its floor 0
  g.rounds = ns_.rounds();
  g.lr_scaling = to_string(opt_.rule);
  g.lr_factor = last_factor_;
  g.gain = last_gain_;
  g.progress = progress_;
  g.batch = static_cast<std::uint32_t>(ranks_ * cur_.local());
  g.local_batch = static_cast<std::uint32_t>(cur_.atomic);
  g.accum_steps = static_cast<std::uint32_t>(cur_.accum);
  for (const auto& e : obs_)
    if (e.o.hosts == hosts_ && e.o.replicas == ranks_ && e.o.atomic == cur_.atomic) {
      g.compute_seconds = e.o.compute;
      g.step_seconds = e.o.sync + cur_.accum * e.o.compute;
    }
  g.throughput = measured_throughput_;
  g.goodput = measured_throughput_ * ns_.efficiency(static_cast<double>(g.batch));
  if (perf_.alpha_c > 0 || perf_.beta_c > 0)
    g.predicted_goodput = goodput(perf_, ns_, hosts_, ranks_, cur_.atomic, cur_.accum);
  g.model = {perf_.alpha_c, perf_.beta_c, perf_.alpha_n, perf_.beta_n,
             perf_.alpha_r, perf_.beta_r, perf_.gamma};
  g.choice = seq_;
  g.choice_from = choice_.from;
  g.choice_predicted = choice_.predicted;
  g.choice_before = choice_.before;
  g.choice_measured = choice_measured_;
  g.choice_replicas = choice_.replicas;
  g.choice_batch = choice_.replicas * static_cast<std::uint32_t>(cur_.local());
  g.choice_progress = choice_.at_progress;
  return g;
}

}  // namespace troupe::actors::goodput
