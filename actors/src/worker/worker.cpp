// The worker actor: a detached actor whose mailbox interleaves training (self-sent ticks, each a
// bounded slice of the loop in worker_loop.cpp) with requests from the master (evaluate).
#include <spdlog/spdlog.h>

#include <cstdlib>

#include <caf/all.hpp>

#include <caf/stateful_actor.hpp>
#include "caf_types.hpp"
#include "troupe/actors/backends.hpp"
#include "troupe/cluster/start_failure.hpp"
#include "troupe/job/data.hpp"
#include "troupe/job/data_model.hpp"
#include "troupe/nn/errc.hpp"
#include "worker/backends/cuda_backend.hpp"

#include "replica_state.hpp"
#include "troupe/model/predictions.hpp"
#include "troupe/model/state.hpp"
#include "troupe/wire/messages.hpp"
#include "worker_state.hpp"

namespace troupe::actors {

namespace {

// The replica the job names: the CUDA backend ([job] device = "gpu" with a native model) or a
// host one (backends.hpp: native or TorchScript).
std::unique_ptr<trainer_backend> make_backend(worker_state& st, worker_host* rt) {
  const auto& spec = rt->spec();
  auto info = job::info_of(st.feed->manifest(), st.feed->source());
  expected<std::unique_ptr<trainer_backend>> b = make_unexpected(core_errc::invalid_argument, "no backend");
  if (spec.uses_gpu() && spec.nn.model.type != "torchscript") {
    auto m = nn::model_registry::instance().create(spec.nn.model, info);
    if (!m) throw std::runtime_error(m.err().to_string());
    b = make_cuda_backend(*rt, *st.rpc, std::move(*m));
  } else {
    b = make_host_backend(spec, info);
  }
  // The model itself refused (its probe's logits, an error inside it): not this worker's to retry.
  if (!b && (b.err() == nn::nn_errc::bad_shape || b.err() == nn::nn_errc::model_failed)) {
    spdlog::error("{}", b.err().to_string());
    spdlog::default_logger()->flush();
    std::_Exit(cluster::exit_model_refused);
  }
  if (!b) throw std::runtime_error(b.err().to_string());
  return std::move(*b);
}

// A prediction job's task output: part files in <job dir>/predictions (model/predictions.hpp).
class part_output final : public task_output {
 public:
  explicit part_output(std::string dir) : dir_(std::move(dir)) {}
  expected<void> write(std::uint64_t task, std::uint64_t first, std::size_t rows, std::size_t width,
                       std::span<const float> labels, std::span<const float> values,
                       double loss_sum) override {
    model::prediction_part p{task,
                             first,
                             rows,
                             static_cast<std::uint32_t>(width),
                             loss_sum,
                             std::vector<float>(labels.begin(), labels.end()),
                             std::vector<float>(values.begin(), values.end())};
    return model::write_part(dir_, p);
  }

 private:
  std::string dir_;
};

// [model] init (the runner wrote its state into the job directory): the replica starts from it.
// A ring job's first ring takes it from its source; a replacement is then synchronised from the
// most trained replica as usual. Under async_ps what counts is its buffers (the shards' parameters
// are pulled over the others).
void start_from_init(worker_state& st, const std::string& dir) {
  auto s = model::read_state(dir);
  if (!s) throw std::runtime_error(s.err().to_string());
  if (!*s) return;
  auto r = restore(*st.backend, (*s)->state, false, false);
  if (!r) throw std::runtime_error(dir + ": " + r.err().to_string());
  spdlog::info("{}: starts from {} ({} tensors, {} buffers)", st.node->self().to_string(), (*s)->meta.writer,
               r->tensors, r->buffers);
}

// An async_ps worker's buffers (batch norm's running statistics; the shards hold the parameters, not
// them): the lowest-index worker writes its own to <job dir>/checkpoints/buffers with the shards'
// checkpoints, and a worker that starts (a relaunch, one joining, every worker of a resumed job)
// takes the latest there. Each started from the module's own (running mean 0, variance 1), and one
// that evaluated for the job soon after scored with them; a resumed job's export had no others.
void set_up_buffer_checkpoints(worker_state& st, worker_host* rt) {
  if (st.backend->buffers().empty()) return;
  const std::string dir = rt->who().job_dir + "/checkpoints/buffers";
  st.checkpoints = std::make_unique<ring_checkpoints>(dir);
  st.next_checkpoint = rt->clock().now() + checkpoint_every(rt->spec());
  auto s = model::read_state(dir);
  if (s && !*s) return;  // none written yet
  auto r = s ? restore(*st.backend, (*s)->state, false, false) : expected<restore_report>(s.err());
  if (!r)  // statistics a few batches relearn: no reason to stop the worker
    spdlog::warn("{}: the buffers in {} are not taken, the module's own are: {}", rt->self().to_string(), dir,
                 r.err().to_string());
  else
    spdlog::info("{}: takes {} buffers from {} ({}, version {})", rt->self().to_string(), r->buffers, dir,
                 (*s)->meta.writer, (*s)->meta.version);
}

// Where the replica's state comes from and goes: a prediction job's output parts; else [model] init,
// and a ring job's checkpoints. Under async_ps init too: the shards hold the parameters (and started
// from the init state themselves), but buffers, batch norm's statistics, are the worker's own (they
// were dropped: a counter of 315 started again at 0), and so are their checkpoints.
void set_up_state(worker_state& st, worker_host* rt) {
  if (st.strat->keeps_row_order()) {
    st.output = std::make_unique<part_output>(rt->who().job_dir + "/predictions");
    st.ctx->output = st.output.get();
    return;
  }
  start_from_init(st, rt->who().job_dir + "/checkpoints/init");
  if (rt->spec().uses_ps()) return set_up_buffer_checkpoints(st, rt);
  st.checkpoints = std::make_unique<ring_checkpoints>(rt->who().job_dir + "/checkpoints/ring");
  st.checkpoints->on_restored = [&st](std::uint64_t step) { tell_ring_restored(st, step); };
  st.ctx->store = st.checkpoints.get();
  st.next_checkpoint = rt->clock().now() + checkpoint_every(rt->spec());
}

}  // namespace

// The strategy's view of the worker: the replica, the services, the node's clock, and the pace when
// [train] max_samples_per_s sets one.
static void make_context(worker_state& st, worker_host* rt) {
  st.ctx.reset(new worker_context{rt->spec(), rt->self(), *st.backend, *st.ps, *st.ring});
  st.ctx->clock = &rt->clock();
  st.ctx->replicas_restarted = [&st](std::uint64_t step) { return forget_rows_kept_after(st, step); };
  if (st.strat->rows_settle_in_rounds())
    st.ctx->replica_overwritten = [&st] { return lose_unsettled_rows(st); };
  if (rt->spec().nn.train.max_samples_per_s > 0)
    st.ctx->pace = [&st](std::size_t samples, double since_s) { pace_compute(st, samples, since_s); };
}

void setup_worker(worker_state& st, worker_host* rt, data_paths data) {
  st.host = rt;
  st.node = rt;
  auto feed = make_data_feed(*rt, data);
  if (!feed) throw std::runtime_error(feed.err().to_string());
  st.feed = std::move(*feed);
  // Replies to this incarnation's requests; a restarted actor registers the name anew.
  auto rpc = rt->open_rpc("rpc");
  if (!rpc) throw std::runtime_error(rpc.err().to_string());
  st.rpc = std::move(*rpc);
  st.leases = std::make_unique<task_lease_client>(*rt, *st.rpc);
  st.backend = make_backend(st, rt);
  st.ps = std::make_unique<remote_ps>(*rt, *st.rpc);
  st.ring_context = std::make_unique<node_ring_context>(*rt);
  if (auto l = st.ring_context->listen(); !l)
    spdlog::warn("{}: no ring listener, no TCP ring links to this worker: {}", rt->self().to_string(),
                 l.err().to_string());
  st.ring = make_ring_session(*st.ring_context, rt->spec());
  st.ring->prepare();
  auto s = make_strategy(rt->spec().job.strategy, rt->spec());
  if (!s) throw std::runtime_error(s.err().to_string());
  st.strat = std::move(*s);
  make_context(st, rt);
  set_up_state(st, rt);
  st.last_report = rt->clock().now();
  open_step_log(st);
  rt->hand_back_pending(true);  // until the loop is over or hands back as the node leaves
  spdlog::info("{}: {} model on the {} backend ({}), strategy {}, {} training records{}",
               rt->self().to_string(), rt->spec().nn.model.type, st.backend->name(), st.backend->placement(),
               st.strat->name(), st.feed->manifest().record_count, st.feed->served() ? " (served)" : "");
}

using worker_actor = caf::stateful_actor<worker_state>;

// Sets the worker up (throws on failure), then interleaves training ticks with the master's
// requests (evaluate). Spawned detached: training blocks.
static caf::behavior run_worker(worker_actor* self, worker_host* rt, data_paths data) {
  setup_worker(self->state, rt, std::move(data));
  // Stopped by the supervisor as the node leaves (SIGTERM) before a tick saw it: the writer's last
  // ring checkpoint all the same (a no-op when the loop already handed it over).
  self->set_exit_handler([=](caf::exit_msg& e) {
    if (self->state.node->leaving()) checkpoint_on_leave(self->state);
    self->quit(e.reason);
  });
  self->send(self, tick_atom::value);
  return {
      [=](tick_atom) {
        auto& clk = self->state.node->clock();
        auto until = clk.now() + tick_budget;
        bool more = true;
        while (more && clk.now() < until) more = train_some(self->state, until);
        if (more) self->send(self, tick_atom::value);
      },
      [=](const message& m) {
        wire::guarded("worker", [&] {
          if (m.kind() == schema::Envelope::Body::JOB &&
              m.body().getJob().which() == schema::JobMessage::EVALUATE)
            evaluate(self->state, m);
        });
      },
  };
}

caf::actor spawn_worker(caf::actor_system& sys, worker_host& rt, data_paths data) {
  return sys.spawn<caf::detached>(run_worker, &rt, std::move(data));
}

}  // namespace troupe::actors
