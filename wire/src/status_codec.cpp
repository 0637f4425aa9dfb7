#include "troupe/wire/status_codec.hpp"

#include <nlohmann/json.hpp>

#include <cmath>

#include "troupe/wire/messages.hpp"

namespace troupe::wire {

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
}

job_status read_job_status(schema::JobStatus::Reader r) {
  job_status s;
  s.job_id = r.getJobId().cStr();
  s.epoch = r.getEpoch();
  s.master_incarnation = r.getMasterIncarnation();
  s.workers_alive = r.getWorkersAlive();
  s.workers_target = r.getWorkersTarget();
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
  if (!s.result_json.empty()) j["result"] = nlohmann::json::parse(s.result_json, nullptr, false);
  auto members = nlohmann::json::array();
  for (const auto& m : s.members)
    members.push_back({{"node", m.id.to_string()},
                       {"role", std::string(cluster::to_string(m.role))},
                       {"address", m.address},
                       {"pid", m.pid},
                       {"state", std::string(cluster::to_string(m.state))}});
  j["members"] = members;
  return j;
}

}  // namespace troupe::wire
