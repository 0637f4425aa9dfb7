// The master's counters across its restarts and the job's disk faults (master_durable.hpp).
#include <spdlog/spdlog.h>
#include <caf/all.hpp>

#include "caf_types.hpp"
#include "master_state.hpp"

namespace troupe::actors {

void restore_counters(master_state& st, const std::string& job_dir) {
  st.durable.job_dir = job_dir;
  auto c = load_counters(job_dir);
  if (!c) {
    spdlog::error("{}: counting from zero", c.err().to_string());
    c = job_counters{};
  }
  st.progress.restore(*c);
  st.durable.master_starts = c->master_starts + 1;
  if (c->master_starts > 0)
    spdlog::info("master start {} of this job: {} samples trained so far", st.durable.master_starts,
                 st.progress.samples_total());
  st.durable.last_save.reset();  // the first tick saves
}

void persist_counters(master_actor* self, bool now) {
  auto& st = self->state;
  auto c = st.progress.counters(st.durable.master_starts);
  auto t = st.ctx->clock().now();
  // The first step's time is saved at once: it is measured once, and a master killed within the
  // second would lose it.
  bool due = now || !st.durable.last_save || t - *st.durable.last_save >= std::chrono::seconds(1) ||
             !st.durable.fault.empty() || c.first_step_wall_ms != st.durable.saved.first_step_wall_ms;
  if (!due || (c == st.durable.saved && st.durable.fault.empty())) return;
  st.durable.last_save = t;
  auto r = save_counters(st.durable.job_dir, c);
  std::string fault = r ? std::string() : r.err().to_string();
  if (r) st.durable.saved = c;
  if (fault == st.durable.fault) return;
  if (fault.empty())
    spdlog::info("{} is writable again: the job resumes", counters_path(st.durable.job_dir));
  else
    spdlog::error("{}: the job pauses until it can be saved", fault);
  st.durable.fault = fault;
  publish_fault(self);
}

std::string master_durable::job_fault() const {
  std::string all = fault;
  for (const auto& [key, f] : node_faults)
    all.append(all.empty() ? "" : "; ").append(key.first).append(": ").append(f);
  return all;
}

void publish_fault(master_actor* self) {
  auto& st = self->state;
  auto fault = st.durable.job_fault();
  if (fault == st.durable.published_fault) return;
  st.durable.published_fault = fault;
  if (auto d = st.names->get("dispenser")) self->send(d, fault_atom::value, fault);
}

const cluster::member* sending_member(const master_state& st, const message& m) {
  const auto* member = st.members.view.find(m.from_node().name);
  return member && member->id == m.from_node() ? member : nullptr;
}

void on_disk_fault(master_actor* self, const message& m) {
  auto& st = self->state;
  if (!sending_member(st, m)) return;
  auto d = m.body().getJob().getDiskFault();
  std::string fault = d.getFault().cStr();
  std::pair<std::string, std::string> key{m.from_node().name, d.getSource().cStr()};
  auto it = st.durable.node_faults.find(key);
  if (fault.empty() && it != st.durable.node_faults.end()) {
    spdlog::info("{}: its {} files are writable again", m.from_node().to_string(), key.second);
    st.durable.node_faults.erase(it);
  } else if (!fault.empty() && (it == st.durable.node_faults.end() || it->second != fault)) {
    spdlog::error("{}: {}: the job pauses until it can write again", m.from_node().to_string(), fault);
    st.durable.node_faults[key] = fault;
  }
  publish_fault(self);
}

}  // namespace troupe::actors
