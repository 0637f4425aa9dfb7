// nodes.json: the JSON form of nodes_file (format 1, docs/cluster.md).
#include <nlohmann/json.hpp>

#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/cluster/process.hpp"

namespace troupe::cluster {

using nlohmann::json;

namespace {
constexpr int format_version = 1;

unexpected corrupt(std::string_view source, const std::string& why) {
  return make_unexpected(cluster_errc::corrupt_file, std::string(source) + ": " + why);
}

// Reads obj[key] as T, or reports which key is missing or of the wrong type.
template <class T>
expected<T> field(const json& obj, const char* key, std::string_view source, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) return corrupt(source, where + "missing field '" + key + "'");
  bool ok = false;
  if constexpr (std::is_same_v<T, std::string>)
    ok = it->is_string();
  else if constexpr (std::is_unsigned_v<T>)
    ok = it->is_number_unsigned();
  else
    ok = it->is_number_integer();
  if (!ok) return corrupt(source, where + "field '" + key + "' has the wrong type (" + it->type_name() + ")");
  return it->get<T>();
}

expected<node_record> parse_record(const json& j, std::string_view source, std::size_t index) {
  std::string where = "nodes[" + std::to_string(index) + "]: ";
  if (!j.is_object()) return corrupt(source, where + "not an object");
  node_record r;
  auto name = field<std::string>(j, "name", source, where);
  if (!name) return name.err();
  auto inc = field<std::uint64_t>(j, "incarnation", source, where);
  if (!inc) return inc.err();
  r.id = node_id{*name, *inc};
  if (!valid_node_name(r.id.name)) return corrupt(source, where + "bad node name '" + r.id.name + "'");
  auto role_text = field<std::string>(j, "role", source, where);
  if (!role_text) return role_text.err();
  auto role = parse_role(*role_text);
  if (!role) return corrupt(source, where + role.err().context());
  r.role = *role;
  auto pid = field<std::int64_t>(j, "pid", source, where);
  if (!pid) return pid.err();
  if (*pid < 0 || *pid > INT32_MAX) return corrupt(source, where + "pid out of range");
  r.pid = static_cast<int>(*pid);
  auto start = field<std::uint64_t>(j, "start_time", source, where);
  if (!start) return start.err();
  r.start_time = *start;
  auto address = field<std::string>(j, "address", source, where);
  if (!address) return address.err();
  r.address = *address;
  auto state = field<std::string>(j, "state", source, where);
  if (!state) return state.err();
  r.state = *state;
  if (auto e = j.find("exit"); e != j.end() && e->is_string()) r.exit = e->get<std::string>();  // optional
  if (auto e = j.find("slurm_job"); e != j.end() && e->is_number_integer()) r.slurm_job = e->get<long>();
  if (auto e = j.find("host"); e != j.end() && e->is_string()) r.host = e->get<std::string>();  // optional
  return r;
}
}  // namespace

std::string to_json(const nodes_file& f) {
  json nodes = json::array();
  for (const auto& r : f.nodes) {
    json n = {
        {"name", r.id.name}, {"incarnation", r.id.incarnation}, {"role", std::string(to_string(r.role))},
        {"pid", r.pid},      {"start_time", r.start_time},      {"address", r.address},
        {"state", r.state}};
    if (!r.exit.empty()) n["exit"] = r.exit;
    if (r.slurm_job > 0) n["slurm_job"] = r.slurm_job;
    if (!r.host.empty()) n["host"] = r.host;
    nodes.push_back(std::move(n));
  }
  json j = {{"format", format_version},
            {"job_id", f.job_id},
            {"epoch", f.epoch},
            {"updated_ms", f.updated_ms},
            {"runner_address", f.runner_address},
            {"metrics_address", f.metrics_address},
            {"workers", f.workers},
            {"nodes", std::move(nodes)}};
  return j.dump(2) + "\n";
}

expected<nodes_file> parse_nodes_json(std::string_view text, std::string_view source) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return corrupt(source, "not valid JSON");
  if (!j.is_object()) return corrupt(source, "the top level is not an object");
  auto format = field<std::int64_t>(j, "format", source, "");
  if (!format) return format.err();
  if (*format != format_version)
    return corrupt(source, "format " + std::to_string(*format) + " is not supported (expected " +
                               std::to_string(format_version) + ")");
  nodes_file f;
  auto job_id = field<std::string>(j, "job_id", source, "");
  if (!job_id) return job_id.err();
  f.job_id = *job_id;
  auto epoch = field<std::uint64_t>(j, "epoch", source, "");
  if (!epoch) return epoch.err();
  f.epoch = *epoch;
  auto updated = field<std::int64_t>(j, "updated_ms", source, "");
  if (!updated) return updated.err();
  f.updated_ms = *updated;
  // Files written before the rename call the runner's address master_address.
  auto runner =
      field<std::string>(j, j.contains("master_address") ? "master_address" : "runner_address", source, "");
  if (!runner) return runner.err();
  f.runner_address = *runner;
  if (auto m = j.find("metrics_address"); m != j.end() && m->is_string()) f.metrics_address = *m;
  if (auto w = j.find("workers"); w != j.end() && w->is_number_unsigned() && *w <= 1u << 20)
    f.workers = w->get<std::uint32_t>();  // optional: older files lack it
  auto nodes = j.find("nodes");
  if (nodes == j.end() || !nodes->is_array()) return corrupt(source, "missing array 'nodes'");
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    auto r = parse_record((*nodes)[i], source, i);
    if (!r) return r.err();
    f.nodes.push_back(std::move(*r));
  }
  return f;
}

node_liveness liveness_of(const node_record& n) {
  if (n.state == "exited" || n.pid <= 0) return node_liveness::gone;
  if (n.start_time == 0)
    return process_alive(n.pid, std::nullopt) ? node_liveness::unknown : node_liveness::gone;
  return process_alive(n.pid, n.start_time) ? node_liveness::runs : node_liveness::gone;
}

}  // namespace troupe::cluster
