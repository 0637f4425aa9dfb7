#include "chaos_observe.hpp"

#include <fstream>

#include "troupe/control/client.hpp"
#include "troupe/core/ids.hpp"

namespace troupe::control {

namespace {

std::uint64_t u64(const nlohmann::json& j, const char* a, const char* b = nullptr) {
  const auto* v = &j;
  if (!v->contains(a)) return 0;
  v = &(*v)[a];
  if (b) {
    if (!v->contains(b)) return 0;
    v = &(*v)[b];
  }
  return v->is_number() ? v->get<std::uint64_t>() : 0;
}

struct member_seen {
  bool old_alive = false;  // the faulted incarnation is still shown alive
  bool new_alive = false;  // a later incarnation of the same name is alive
};

member_seen find_member(const nlohmann::json& st, const std::string& name, std::uint64_t inc) {
  member_seen m;
  if (!st.contains("members")) return m;
  for (const auto& e : st["members"]) {
    auto id = node_id::parse(e.value("node", std::string()));
    if (!id || id->name != name) continue;
    bool alive = e.value("state", std::string()) == "alive";
    if (id->incarnation == inc && alive) m.old_alive = true;
    if (id->incarnation > inc && alive) m.new_alive = true;
  }
  return m;
}

// The runner relaunched the node: nodes.json has another pid (Slurm job) under its name.
bool replaced_on_disk(const cluster::nodes_file* nodes, const std::string& name, const fault_record& rec) {
  if (!nodes) return false;
  for (const auto& n : nodes->nodes)
    if (n.id.name == name && (n.pid != rec.pid || n.slurm_job != rec.slurm_job || n.state == "exited"))
      return true;
  return false;
}

// After the job's end the runner records every node exited, and nobody answers status any more.
bool all_exited(const cluster::nodes_file* nodes) {
  if (!nodes || nodes->nodes.empty()) return false;
  for (const auto& n : nodes->nodes)
    if (n.state != "exited") return false;
  return true;
}

// The alive master's incarnation in a status answer; 0 without one.
std::uint64_t master_of(const nlohmann::json& st) {
  if (!st.contains("members")) return 0;
  for (const auto& e : st["members"]) {
    auto id = node_id::parse(e.value("node", std::string()));
    if (id && id->name == "master" && e.value("state", std::string()) == "alive") return id->incarnation;
  }
  return 0;
}

// A stopped node running again a second after its SIGCONT was never declared dead: its exit later
// (the job's end, another fault) is not this fault's detection (the master leaving at the job's end
// read as "detected", then "job finished before recovery was seen").
bool resumed_undetected(const fault_record& rec, double t) {
  return rec.spec.kind == fault_kind::stop && rec.detected_s < 0 && rec.resumed_s >= 0 &&
         t > rec.resumed_s + 1.0;
}

std::string name_of(const std::string& node) {
  return node.substr(0, node.find('#'));
}

}  // namespace

// How the job ended: the runner's result.json's status (the master's has none); "" while it runs.
std::string job_end_state(const std::string& job_dir) {
  std::ifstream in(job_dir + "/result.json");
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object()) return {};
  auto st = j.find("status");
  return st != j.end() && st->is_string() ? st->get<std::string>() : std::string();
}

void observer::before_fault(std::size_t index, const fault_record& rec, const cluster::node_record& n) {
  baseline b;
  b.incarnation = n.id.incarnation;
  b.samples = u64(last_, "samples_total");
  b.requeued = u64(last_, "tasks", "requeued");
  b.restarts = u64(last_, "restarts");
  b.master = master_of(last_);
  b.at = clock_.now();
  // Slowed, not lost: nothing to detect or recover from.
  b.done = rec.spec.kind == fault_kind::drop || rec.spec.kind == fault_kind::delay ||
           rec.spec.kind == fault_kind::throttle;
  open_[index] = b;
}

void observer::update(fault_record& rec, baseline& b, const nlohmann::json& st,
                      const cluster::nodes_file* nodes) {
  double t = std::chrono::duration<double>(clock_.now() - b.at).count();
  std::string name = name_of(rec.node);
  auto m = find_member(st, name, b.incarnation);
  bool status_ok = st.contains("members");
  // Every restart since the fault counts, whether or not the faulted node was seen to go: a fault
  // on one node may cost others (a paused master that dropped its peers).
  if (status_ok) count_since(rec, b, st);
  // Once the job is over its nodes leave and exit: that is not the fault detected (close() says
  // what became of a fault never detected). The runner may be gone before a poll saw it finished.
  if (rec.detected_s < 0 && (st.value("finished", false) || (!status_ok && all_exited(nodes)))) return;
  if (resumed_undetected(rec, t)) {
    rec.note = "resumed before it was declared dead";
    b.done = true;
    return;
  }
  // Missing from the membership counts under the master of the fault's time only: a relaunched
  // master lists the nodes that joined it since, and a stopped one cannot (a worker stopped while the
  // master restarted read as detected at once, and "recovered" when a later kill replaced it).
  const bool absent = status_ok && !m.old_alive && (name == "master" || master_of(st) == b.master);
  if (rec.detected_s < 0 && (absent || replaced_on_disk(nodes, name, rec))) {
    rec.detected_s = t;
    b.samples_at_detect = u64(st, "samples_total");
  }
  if (rec.detected_s < 0 || !status_ok) return;
  // A killed node must be replaced, and so must a stopped one: declared dead, it is fenced by the
  // runner and relaunched.
  bool replaced = m.new_alive;
  bool trained = u64(st, "samples_total") > b.samples_at_detect;
  if (replaced && trained) {
    rec.recovered_s = t;
    b.done = true;
  } else if (st.value("finished", false)) {
    rec.note = "job finished before recovery was seen";
    b.done = true;
  }
}

void observer::count_since(fault_record& rec, const baseline& b, const nlohmann::json& st) {
  rec.requeued = u64(st, "tasks", "requeued") - std::min(b.requeued, u64(st, "tasks", "requeued"));
  rec.restarts = u64(st, "restarts") - std::min(b.restarts, u64(st, "restarts"));
}

void observer::close(std::vector<fault_record>& recs) {
  const std::string ended = job_end_state(job_dir_);
  for (auto& [i, b] : open_) {
    if (b.done || i >= recs.size()) continue;
    auto& rec = recs[i];
    if (last_.contains("members")) count_since(rec, b, last_);
    if (rec.spec.kind == fault_kind::stop && rec.detected_s < 0 && rec.resumed_s >= 0 && rec.note.empty())
      rec.note = "resumed before it was declared dead";
    // The job ended between two polls after the fault was detected: the runner answers no status
    // while it stops the nodes and writes the model, so no poll saw it finished (a kill in a job's
    // last second read as never recovered).
    if (rec.detected_s >= 0 && rec.recovered_s < 0 && rec.note.empty() && !ended.empty())
      rec.note = "job " + ended + " before recovery was seen";
    b.done = true;
  }
}

void observer::poll(std::vector<fault_record>& recs) {
  auto s = job_status_json(job_dir_);
  nlohmann::json st = nlohmann::json::object();
  if (s) {
    auto j = nlohmann::json::parse(*s, nullptr, false);
    if (!j.is_discarded()) st = last_ = j;
  }
  std::optional<cluster::nodes_file> nodes;
  if (auto d = cluster::job_dir::open(job_dir_); d)
    if (auto n = d->read_nodes(); n) nodes = *n;
  for (auto& [i, b] : open_)
    if (!b.done && i < recs.size()) update(recs[i], b, st, nodes ? &*nodes : nullptr);
}

bool observer::all_resolved(const std::vector<fault_record>&) const {
  for (const auto& [i, b] : open_)
    if (!b.done) return false;
  return true;
}

}  // namespace troupe::control
