#include "troupe/wire/status_codec.hpp"

#include <nlohmann/json.hpp>

#include <cmath>

#include "troupe/wire/messages.hpp"

namespace troupe::wire {

void write_goodput(schema::GoodputReport::Builder b, const goodput_report& g) {
  b.setRingRank(g.ring_rank);
  b.setReplicas(g.replicas);
  b.setHosts(g.hosts);
  b.setBaseBatch(g.base_batch);
  b.setGradSqr(g.grad_sqr);
  b.setGradVar(g.grad_var);
  b.setNoiseScale(g.noise_scale);
  b.setRounds(g.rounds);
  b.setLrScaling(g.lr_scaling);
  b.setLrFactor(g.lr_factor);
  b.setGain(g.gain);
  b.setProgress(g.progress);
  b.setBatch(g.batch);
  b.setLocalBatch(g.local_batch);
  b.setAccumSteps(g.accum_steps);
  b.setComputeSeconds(g.compute_seconds);
  b.setStepSeconds(g.step_seconds);
  b.setThroughput(g.throughput);
  b.setGoodput(g.goodput);
  b.setPredictedGoodput(g.predicted_goodput);
  auto m = b.initModel();
  m.setAlphaC(g.model.alpha_c);
  m.setBetaC(g.model.beta_c);
  m.setAlphaN(g.model.alpha_n);
  m.setBetaN(g.model.beta_n);
  m.setAlphaR(g.model.alpha_r);
  m.setBetaR(g.model.beta_r);
  m.setGamma(g.model.gamma);
  b.setChoice(g.choice);
  b.setChoiceFrom(g.choice_from);
  b.setChoicePredicted(g.choice_predicted);
  b.setChoiceBefore(g.choice_before);
  b.setChoiceMeasured(g.choice_measured);
  b.setPushShards(g.push_shards);
  b.setChoiceBatch(g.choice_batch);
  b.setChoiceReplicas(g.choice_replicas);
  b.setChoiceProgress(g.choice_progress);
}

goodput_report read_goodput(schema::GoodputReport::Reader r) {
  goodput_report g;
  g.valid = true;
  g.ring_rank = r.getRingRank();
  g.replicas = r.getReplicas();
  g.hosts = r.getHosts();
  g.base_batch = r.getBaseBatch();
  g.grad_sqr = r.getGradSqr();
  g.grad_var = r.getGradVar();
  g.noise_scale = r.getNoiseScale();
  g.rounds = r.getRounds();
  g.lr_scaling = r.getLrScaling().cStr();
  g.lr_factor = r.getLrFactor();
  g.gain = r.getGain();
  g.progress = r.getProgress();
  g.batch = r.getBatch();
  g.local_batch = r.getLocalBatch();
  g.accum_steps = r.getAccumSteps();
  g.compute_seconds = r.getComputeSeconds();
  g.step_seconds = r.getStepSeconds();
  g.throughput = r.getThroughput();
  g.goodput = r.getGoodput();
  g.predicted_goodput = r.getPredictedGoodput();
  auto m = r.getModel();
  g.model = {m.getAlphaC(), m.getBetaC(), m.getAlphaN(), m.getBetaN(),
             m.getAlphaR(), m.getBetaR(), m.getGamma()};
  g.choice = r.getChoice();
  g.choice_from = r.getChoiceFrom();
  g.choice_predicted = r.getChoicePredicted();
  g.choice_before = r.getChoiceBefore();
  g.choice_measured = r.getChoiceMeasured();
  g.push_shards = r.getPushShards();
  g.choice_batch = r.getChoiceBatch();
  g.choice_replicas = r.getChoiceReplicas();
  g.choice_progress = r.getChoiceProgress();
  return g;
}

namespace {
nlohmann::json to_json(const throughput_model& m) {
  return {{"alpha_c", m.alpha_c}, {"beta_c", m.beta_c}, {"alpha_n", m.alpha_n}, {"beta_n", m.beta_n},
          {"alpha_r", m.alpha_r}, {"beta_r", m.beta_r}, {"gamma", m.gamma}};
}
}  // namespace

nlohmann::json to_json(const goodput_report& g) {
  return {{"ring_rank", g.ring_rank},
          {"replicas", g.replicas},
          {"hosts", g.hosts},
          {"base_batch", g.base_batch},
          {"grad_sqr", g.grad_sqr},
          {"grad_var", g.grad_var},
          // null before the first estimate (rounds 0) too: 0 read as no noise at all.
          {"noise_scale",
           std::isfinite(g.noise_scale) && g.rounds > 0 ? nlohmann::json(g.noise_scale) : nlohmann::json()},
          {"noise_scale_infinite", std::isinf(g.noise_scale)},
          {"rounds", g.rounds},
          {"lr_scaling", g.lr_scaling},
          {"lr_factor", g.lr_factor},
          {"gain", g.gain},
          {"progress", g.progress},
          {"batch", g.batch},
          {"local_batch", g.local_batch},
          {"accum_steps", g.accum_steps},
          {"compute_seconds", g.compute_seconds},
          {"step_seconds", g.step_seconds},
          {"throughput", g.throughput},
          {"goodput", g.goodput},
          {"predicted_goodput", g.predicted_goodput},
          {"model", to_json(g.model)},
          {"choice", g.choice},
          {"choice_from", g.choice_from},
          {"choice_predicted", g.choice_predicted},
          {"choice_before", g.choice_before},
          {"choice_measured", g.choice_measured},
          {"push_shards", g.push_shards},
          {"choice_batch", g.choice_batch},
          {"choice_replicas", g.choice_replicas},
          {"choice_progress", g.choice_progress}};
}

void write_task_counts(schema::TaskCounts::Builder b, const task_counts& c) {
  b.setTodo(c.todo);
  b.setDoing(c.doing);
  b.setDone(c.done);
  b.setFailed(c.failed);
  b.setRequeued(c.requeued);
  b.setDataEpoch(c.data_epoch);
  b.setDataEpochs(c.data_epochs);
}

task_counts read_task_counts(schema::TaskCounts::Reader r) {
  task_counts c;
  c.todo = r.getTodo();
  c.doing = r.getDoing();
  c.done = r.getDone();
  c.failed = r.getFailed();
  c.requeued = r.getRequeued();
  c.data_epoch = r.getDataEpoch();
  c.data_epochs = r.getDataEpochs();
  return c;
}

void write_job_status(schema::JobStatus::Builder b, const job_status& s) {
  b.setJobId(s.job_id);
  b.setEpoch(s.epoch);
  b.setMasterIncarnation(s.master_incarnation);
  b.setWorkersAlive(s.workers_alive);
  b.setWorkersTarget(s.workers_target);
  b.setWorkersLaunched(s.workers_launched);
  b.setPsAlive(s.ps_alive);
  write_task_counts(b.initTasks(), s.tasks);
  b.setSamplesPerSec(s.samples_per_sec);
  b.setLoss(s.loss);
  b.setSamplesTotal(s.samples_total);
  b.setFinished(s.finished);
  b.setResultJson(s.result_json);
  wire::write_members(b.initMembers(static_cast<unsigned>(s.members.size())), s.members);
  b.setRestarts(s.restarts);
  b.setFault(s.fault);
  b.setEvaluating(s.evaluating);
  b.setTaskError(s.task_error);
  b.setNotice(s.notice);
  if (s.goodput.valid) write_goodput(b.initGoodput(), s.goodput);
}

job_status read_job_status(schema::JobStatus::Reader r) {
  job_status s;
  s.job_id = r.getJobId().cStr();
  s.epoch = r.getEpoch();
  s.master_incarnation = r.getMasterIncarnation();
  s.workers_alive = r.getWorkersAlive();
  s.workers_target = r.getWorkersTarget();
  s.workers_launched = r.getWorkersLaunched();
  s.ps_alive = r.getPsAlive();
  s.tasks = read_task_counts(r.getTasks());
  s.samples_per_sec = r.getSamplesPerSec();
  s.loss = r.getLoss();
  s.samples_total = r.getSamplesTotal();
  s.finished = r.getFinished();
  s.result_json = r.getResultJson().cStr();
  s.members = wire::read_members(r.getMembers());
  s.restarts = r.getRestarts();
  s.fault = r.getFault().cStr();
  s.evaluating = r.getEvaluating().cStr();
  s.task_error = r.getTaskError().cStr();
  s.notice = r.getNotice().cStr();
  if (r.hasGoodput()) s.goodput = read_goodput(r.getGoodput());
  return s;
}

bool job_status::has_loss() const {
  return samples_total > 0 && std::isfinite(loss);
}

nlohmann::json to_json(const job_status& s) {
  nlohmann::json j;
  j["job"] = s.job_id;
  j["membership_epoch"] = s.epoch;
  j["workers_alive"] = s.workers_alive;
  j["workers_target"] = s.workers_target;
  j["workers_launched"] = s.workers_launched;
  j["ps_alive"] = s.ps_alive;
  const auto& t = s.tasks;
  j["tasks"] = {
      {"todo", t.todo}, {"doing", t.doing}, {"done", t.done}, {"failed", t.failed}, {"requeued", t.requeued}};
  j["data_epoch"] = t.data_epoch;
  j["data_epochs"] = t.data_epochs;
  j["samples_per_sec"] = s.samples_per_sec;
  j["loss"] = s.has_loss() ? nlohmann::json(s.loss) : nlohmann::json(nullptr);
  j["samples_total"] = s.samples_total;
  j["restarts"] = s.restarts;
  j["finished"] = s.finished;
  if (!s.fault.empty()) j["fault"] = s.fault;
  if (!s.evaluating.empty()) j["evaluating"] = s.evaluating;
  if (!s.task_error.empty()) j["task_error"] = s.task_error;
  if (!s.notice.empty()) j["notice"] = s.notice;
  if (!s.result_json.empty()) j["result"] = nlohmann::json::parse(s.result_json, nullptr, false);
  auto members = nlohmann::json::array();
  for (const auto& m : s.members)
    members.push_back({{"node", m.id.to_string()},
                       {"role", std::string(cluster::to_string(m.role))},
                       {"address", m.address},
                       {"pid", m.pid},
                       {"state", std::string(cluster::to_string(m.state))}});
  j["members"] = members;
  if (s.goodput.valid) j["goodput"] = to_json(s.goodput);
  return j;
}

}  // namespace troupe::wire
