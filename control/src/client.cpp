#include "troupe/control/client.hpp"
#include "troupe/transport/endpoint.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <tuple>

#include <nlohmann/json.hpp>

#include "client_session.hpp"
#include "client_timeline.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/collective/cleanup.hpp"
#include "troupe/core/client_node.hpp"
#include "troupe/storage/disk_fault.hpp"
#include "troupe/storage/task_journal.hpp"
#include "troupe/wire/job_token.hpp"
#include "troupe/wire/messages.hpp"
#include "troupe/wire/rpc.hpp"
#include "troupe/wire/status_codec.hpp"

namespace troupe::control {

using wire::rpc_client;

namespace client_detail {

nlohmann::json read_result(const cluster::job_dir& dir) {
  std::ifstream in(dir.result_path());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return nlohmann::json::parse(text, nullptr, false);
}

std::string ended_as(const cluster::job_dir& dir) {
  auto j = read_result(dir);
  // The master's result.json alone (no "status", which the runner adds as it ends): its runner died
  // as the job ended, as `troupe status` says; stop and scale said "it ended (finished)".
  return j.is_object() && j.contains("status") && j["status"].is_string() ? j["status"].get<std::string>()
                                                                          : std::string();
}

std::optional<int> starting_runner(const cluster::job_dir& dir) {
  std::error_code ec;
  auto pid = dir.runner_pid();
  if (!pid || std::filesystem::exists(dir.nodes_path(), ec)) return std::nullopt;
  return pid;
}

// A job whose runner died (SIGKILL, a crash) left its rings and beacons in /dev/shm (~4 MiB a
// worker) until a --resume: removed once none of its nodes on this host runs. What was done, for
// the answer ("" when nothing was).
std::string remove_dead_job_leftovers(const cluster::job_dir& dir) {
  const auto instance = dir.read_instance();
  if (instance.empty()) return {};
  if (auto nodes = dir.read_nodes(); nodes)
    for (const auto& n : nodes->nodes)
      if (n.host.empty() && cluster::liveness_of(n) != cluster::node_liveness::gone)  // unknown: keep
        return "; " + n.id.to_string() + " still runs (pid " + std::to_string(n.pid) + ")";
  const auto n = collective::remove_job_leftovers(collective::instance_key(dir.job_id(), instance));
  if (n == 0) return {};  // it said so when there was nothing
  return "; removed what it left in shared memory (" + std::to_string(n) + " name" + (n == 1 ? "" : "s") +
         " in /dev/shm)";
}

error unreachable_runner(const cluster::job_dir& dir, const std::string& address, error e) {
  if (dir.runner_pid() && read_result(dir).is_object() && ended_as(dir).empty())
    return error(
        core_errc::invalid_argument,
        "job " + dir.job_id() +
            " is ending: its master finished it, and its runner is stopping its nodes and writing its "
            "model (troupe status --job-dir " +
            dir.path() + " says when it is over)");
  return std::move(e).wrap("job " + dir.job_id() + " (runner at " + address + "; is it still running?)");
}

expected<std::unique_ptr<session>> connect_runner(const std::string& job_dir, bool clean_dead) {
  auto dir = cluster::job_dir::open(job_dir);
  if (!dir) return dir.err();
  if (std::filesystem::exists(dir->lock_path()) && !dir->runner_pid()) {
    auto how = ended_as(*dir);
    const std::string cleaned = how.empty() && clean_dead ? remove_dead_job_leftovers(*dir) : "";
    return make_unexpected(core_errc::invalid_argument,
                           "job " + dir->job_id() + " is not running: " +
                               (how.empty() ? "its runner died" + cleaned +
                                                  " (continue it: troupe run --resume " + dir->path() + ")"
                                            : "it ended (" + how + "; see " + dir->result_path() + ")"));
  }
  // A runner that has not started its nodes yet (it prepares the data: minutes for a large import)
  // wrote no nodes.json: said so (it read "missing file: nodes.json").
  if (auto pid = starting_runner(*dir))
    return make_unexpected(core_errc::io_error,
                           "job " + dir->job_id() + " is starting: its runner (pid " + std::to_string(*pid) +
                               ") prepares the data or starts its nodes; try again in a moment");
  auto nodes = dir->read_nodes();
  if (!nodes) return nodes.err();
  auto token = wire::read_job_token(job_dir);
  if (!token) return token.err();
  transport_config cfg;
  cfg.token = *token;
  cfg.reconnect_attempts = 0;
  auto s = std::make_unique<session>();
  auto net = endpoint::create(client_node_id(static_cast<std::uint64_t>(::getpid())), cfg);
  if (!net) return net.err();
  s->net = std::move(*net);
  auto peer = s->net->connect(nodes->runner_address, false);
  if (!peer) return unreachable_runner(*dir, nodes->runner_address, std::move(peer).err());
  auto rpc = wire::rpc_client::create(*s->net, "cli");
  if (!rpc) return rpc.err();
  s->rpc = std::move(*rpc);
  return s;
}

}  // namespace client_detail

using namespace client_detail;

namespace {

// A job no runner runs any more, from what it left on disk: result.json (how it ended), the task
// journal (durable counts) and nodes.json (the nodes' final states).
// The epoch of the first task not over (todo or doing; tasks are numbered epoch by epoch), or the
// last epoch when every task is.
std::uint32_t data_epoch_reached(const storage::task_journal& j) {
  const auto per_epoch = j.tasks_per_epoch();
  std::uint32_t epoch = j.options().epochs > 0 ? j.options().epochs - 1 : 0;
  for (auto state : {storage::task_state::todo, storage::task_state::doing})
    if (auto tasks = j.list(state); tasks && !tasks->empty() && per_epoch > 0)
      epoch = std::min(epoch, static_cast<std::uint32_t>(tasks->front().id / per_epoch));
  return epoch;
}

// A dead runner's nodes that are Slurm jobs: they run on (no death signal reaches them) until their
// runner_timeout_s passes without its beat, and train meanwhile: "dead" alone read as if nothing
// ran. What to say of them ("" when none).
std::string slurm_nodes_left(const cluster::job_dir& dir) {
  auto nodes = dir.read_nodes();
  if (!nodes) return {};
  std::size_t n = 0;
  for (const auto& r : nodes->nodes) n += r.slurm_job > 0 && r.id.name != "runner";
  if (n == 0) return {};
  return "; its " + std::to_string(n) + " Slurm job(s) (troupe-" + dir.job_id() +
         ":<node> in squeue) may still run, and train, until [cluster] runner_timeout_s passes without the "
         "runner's beat; --resume cancels them first";
}

// Why a job no runner runs has no result.json: its runner died, or (the disk holding it full) could
// not write one: a job failed on a full disk read as a dead runner.
std::string no_result_reason(const std::string& path) {
  const std::string resume = "troupe run --resume " + path;
  std::error_code ec;
  if (const auto space = std::filesystem::space(path, ec); !ec && storage::filesystem_full(path))
    return "no runner runs this job and it left no result.json: the disk holding " + path + " is full (" +
           std::to_string(space.available / 1024) +
           " KiB free), so its runner could not write one (a job ends failed once a disk fault lasts "
           "job.disk_full_timeout_ms). Free space, then continue it with " +
           resume;
  return "no runner runs this job and it left no result.json (its runner died): continue it with " + resume;
}

// A job whose master wrote its result and whose runner died before it wrote its own (and the model).
std::string ended_unwritten(const std::string& path) {
  return "no runner runs this job: its tasks were over, but its runner died before it wrote the job's "
         "result and model (result.json holds the master's figures alone): continue it with troupe run "
         "--resume " +
         path + ", which writes them";
}

// How the job ended (its result.json), or that its runner died (none: the counts it left; the
// samples no fewer than the journal's `records_done`, as the master reports them).
void add_ending(nlohmann::json& j, const cluster::job_dir& dir, const nlohmann::json& result,
                std::uint64_t records_done) {
  // The master's result.json alone (no "status": the runner adds it, with the model, as it ends):
  // its runner died as the job ended. Said "finished" with no reason, no model written.
  if (result.is_object() && result.contains("status")) {
    j["result"] = result;
    j["state"] = result.value("status", "finished");
    j["reason"] = result.value("reason", "");
    j["samples_total"] = result.value("samples_trained", result.value("samples_total", 0ull));
    if (result.contains("train_loss") && result["train_loss"].is_number()) j["loss"] = result["train_loss"];
    j["restarts"] = result.value("node_restarts", 0ull);
    if (result.contains("tasks_requeued")) j["tasks"]["requeued"] = result["tasks_requeued"];
  } else {
    j["finished"] = false;
    j["state"] = "dead";
    // The samples the master had counted (it keeps them in counters.json as it goes).
    std::ifstream in(dir.path() + "/counters.json");
    // Saved every few seconds: behind the journal's done tasks after a SIGKILL (1,131,904 samples
    // beside 368 done tasks of 4,096 records).
    auto c = nlohmann::json::parse(in, nullptr, false);
    j["samples_total"] =
        std::max<std::uint64_t>(c.is_object() ? c.value("samples_trained", 0ull) : 0, records_done);
    // The last training loss the master logged (the progress line's; it showed "loss -").
    if (const double loss = last_logged_loss(dir.path()); std::isfinite(loss)) j["loss"] = loss;
    j["reason"] = (result.is_object() ? ended_unwritten(dir.path()) : no_result_reason(dir.path())) +
                  slurm_nodes_left(dir);
  }
}

expected<std::string> ended_job_status(const cluster::job_dir& dir, bool with_timeline) {
  wire::job_status st;
  st.job_id = dir.job_id();
  st.finished = true;
  std::string journal_error;  // said: its counts read as an empty job's (0 todo, 0 done)
  std::uint64_t records_done = 0;
  std::error_code ec;
  if (auto j = storage::task_journal::open(dir.journal_dir())) {
    if (auto c = j->counts()) {
      st.tasks.todo = c->todo;
      st.tasks.doing = c->doing;
      st.tasks.done = c->done;
      st.tasks.failed = c->failed;
      records_done = c->records_done;
    } else {
      journal_error = c.err().to_string();
    }
    st.tasks.data_epochs = j->options().epochs;
    st.tasks.data_epoch = data_epoch_reached(*j);
  } else if (std::filesystem::exists(dir.journal_dir() + "/data.mdb", ec)) {
    journal_error = j.err().to_string();
  }
  auto members = nlohmann::json::array();
  std::string nodes_error;
  if (auto nodes = dir.read_nodes()) {
    st.epoch = nodes->epoch;
    st.workers_target = nodes->workers;  // what a --resume restores (it read "workers 0/0")
    members = members_json(*nodes, true);
  } else if (std::filesystem::exists(dir.nodes_path(), ec)) {
    nodes_error = nodes.err().to_string();  // no member listed: said why
  }
  auto j = wire::to_json(st);
  if (!journal_error.empty()) j["journal_error"] = journal_error;
  if (!nodes_error.empty()) j["nodes_error"] = nodes_error;
  j["members"] = std::move(members);
  add_ending(j, dir, read_result(dir), records_done);
  if (with_timeline) add_recent_events(j, dir.path());  // what the timeline says happened last
  return j.dump();
}

}  // namespace

std::string ended_as(const std::string& job_dir) {
  auto dir = cluster::job_dir::open(job_dir);
  return dir ? ended_as(*dir) : std::string();
}

expected<std::string> job_status_json(const std::string& job_dir, bool from_timeline) {
  if (auto dir = cluster::job_dir::open(job_dir)) {
    if (!dir->runner_pid()) return ended_job_status(*dir, from_timeline);
    // Its runner prepares the data (minutes for a large import) or starts its nodes: a state, as a
    // queued job's is (it was an error, exit 1, and --json printed no JSON; a resumed job read as
    // its earlier run's end from the timeline).
    if (auto pid = starting_runner(*dir))
      return nlohmann::json{{"job", dir->job_id()},
                            {"state", "starting"},
                            {"finished", false},
                            {"runner_pid", *pid},
                            {"reason", "its runner prepares the data or starts its nodes"}}
          .dump();
  }
  auto s = connect_runner(job_dir);
  if (!s) return from_timeline ? status_from_timeline(job_dir, s.err()) : s.err();
  auto& rpc = *(*s)->rpc;
  auto o = wire::job();
  o.body.initStatusRequest();
  auto reply = rpc.call({"runner", "runner", std::move(o.out)}, std::chrono::seconds(3));
  if (!reply) return reply.err();
  nlohmann::json j;
  bool ok = wire::guarded(
      "status", [&] { j = wire::to_json(wire::read_job_status(reply->body().getJob().getJobStatus())); });
  if (!ok) return make_unexpected(core_errc::parse_error, "malformed status reply from the runner");
  // Every answer has a state (a running job's had none: a script polling "state" saw nothing).
  if (!j.contains("state")) j["state"] = j.value("finished", false) ? "ending" : "running";
  if (auto dir = cluster::job_dir::open(job_dir)) add_placement(j, *dir);
  return j.dump();
}

expected<scale_answer> scale_job(const std::string& job_dir, std::uint32_t workers, const std::string& host) {
  auto s = connect_runner(job_dir);
  if (!s) return s.err();
  auto& rpc = *(*s)->rpc;
  auto o = wire::job();
  auto scale = o.body.initScale();
  scale.setWorkers(workers);
  scale.setHost(host);
  auto reply = rpc.call({"runner", "runner", std::move(o.out)}, std::chrono::seconds(10));
  if (!reply) return reply.err();
  auto r = reply->body().getJob().getScaleReply();
  // A host the runner refused: nothing changed (a clamp is only a note: the scale happened).
  // out_of_range: the request's own fault (exit 2); a job not running is invalid_argument (exit 1).
  if (r.getRefused()) return make_unexpected(core_errc::out_of_range, r.getError().cStr());
  return scale_answer{r.getWorkers(), r.getError().cStr()};
}

}  // namespace troupe::control
