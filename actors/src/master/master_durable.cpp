// The master's counters across its restarts (job_counters.hpp) and the disk faults saving them.
#include <spdlog/spdlog.h>
#include <caf/all.hpp>

#include "caf_types.hpp"
#include "master_state.hpp"

namespace troupe::actors {

namespace {
job_counters current(const master_state& st) {
  job_counters c;
  c.samples_trained = st.samples_total;
  c.dropped_steps = st.dropped_steps;
  c.first_step_wall_ms = st.first_step_wall_ms;
  c.master_starts = st.master_starts;
  return c;
}
}  // namespace

void restore_counters(master_state& st, const std::string& job_dir) {
  st.job_dir = job_dir;
  auto c = load_counters(job_dir);
  if (!c) {
    spdlog::error("{}: counting from zero", c.err().to_string());
    c = job_counters{};
  }
  st.samples_total = c->samples_trained;
  st.dropped_steps = c->dropped_steps;
  st.first_step_wall_ms = c->first_step_wall_ms;
  st.master_starts = c->master_starts + 1;
  if (c->master_starts > 0)
    spdlog::info("master start {} of this job: {} samples trained so far", st.master_starts,
                 st.samples_total);
  st.last_save.reset();  // the first tick saves
}

void persist_counters(master_actor* self, bool now) {
  auto& st = self->state;
  auto c = current(st);
  auto t = st.ctx->clock().now();
  // The first step's time is saved at once: it is measured once, and a master killed within the
  // second would lose it.
  bool due = now || !st.last_save || t - *st.last_save >= std::chrono::seconds(1) || !st.fault.empty() ||
             c.first_step_wall_ms != st.saved.first_step_wall_ms;
  if (!due || (c == st.saved && st.fault.empty())) return;
  st.last_save = t;
  auto r = save_counters(st.job_dir, c);
  std::string fault = r ? std::string() : r.err().to_string();
  if (r) st.saved = c;
  if (fault == st.fault) return;
  if (fault.empty())
    spdlog::info("{} is writable again: the job resumes", counters_path(st.job_dir));
  else
    spdlog::error("{}: the job pauses until it can be saved", fault);
  st.fault = fault;
  publish_fault(self);
}

std::string job_fault(const master_state& st) {
  std::string all = st.fault;
  for (const auto& [key, fault] : st.node_faults)
    all.append(all.empty() ? "" : "; ").append(key.first + ": " + fault);
  return all;
}

void publish_fault(master_actor* self) {
  auto& st = self->state;
  auto fault = job_fault(st);
  if (fault == st.published_fault) return;
  st.published_fault = fault;
  if (auto d = st.names->get("dispenser")) self->send(d, fault_atom::value, fault);
}

void on_disk_fault(master_actor* self, const message& m) {
  auto& st = self->state;
  const auto* member = st.view.find(m.from_node().name);
  if (!member || member->id != m.from_node()) return;  // a dead incarnation's word
  auto d = m.body().getJob().getDiskFault();
  std::string fault = d.getFault().cStr();
  std::pair<std::string, std::string> key{m.from_node().name, d.getSource().cStr()};
  auto it = st.node_faults.find(key);
  if (fault.empty() && it != st.node_faults.end()) {
    spdlog::info("{}: its {} files are writable again", m.from_node().to_string(), key.second);
    st.node_faults.erase(it);
  } else if (!fault.empty() && (it == st.node_faults.end() || it->second != fault)) {
    spdlog::error("{}: {}: the job pauses until it can write again", m.from_node().to_string(), fault);
    st.node_faults[key] = fault;
  }
  publish_fault(self);
}

}  // namespace troupe::actors
