// `troupe status`, `troupe scale`, `troupe stop`: talk to a running job's runner.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "troupe/control/client.hpp"

namespace troupe::cli {
namespace {

struct target {
  std::string job_dir;
  std::string root = "jobs";
};

void add_target(CLI::App& sub, const std::shared_ptr<target>& t) {
  sub.add_option(
      "--job-dir", t->job_dir,
      "the job's directory (default: your running job started last under --root, else the newest)");
  sub.add_option("--root", t->root, "where job directories are (default: jobs)");
}

// The job a command acted on, as it names it (with --job-dir left out, the newest: said, so that a
// stop or scale cannot act on another job unseen).
std::string job_id_of(const std::string& dir) {
  auto p = std::filesystem::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "jobs/x/"
  return p.filename().string();
}

// The job's headline, its task counts (and data epoch) and its throughput line.
void print_summary(const nlohmann::json& j) {
  const auto& t = j["tasks"];
  std::string state = j.value("state", j["finished"].get<bool>() ? "finished" : "running");
  std::printf("job %s  membership epoch %llu  %s\n", j["job"].get<std::string>().c_str(),
              static_cast<unsigned long long>(j["membership_epoch"].get<std::uint64_t>()), state.c_str());
  if (j.contains("reason")) std::printf("reason: %s\n", j["reason"].get<std::string>().c_str());
  if (j.contains("fault")) std::printf("PAUSED: %s\n", j["fault"].get<std::string>().c_str());
  if (j.contains("nodes_error"))
    std::printf("nodes.json cannot be read (no node is listed): %s\n",
                j["nodes_error"].get<std::string>().c_str());
  if (j.contains("journal_error"))
    std::printf("the task journal cannot be read (the counts below are not the job's): %s\n",
                j["journal_error"].get<std::string>().c_str());
  std::printf("tasks: %llu todo, %llu doing, %llu done, %llu failed, %llu requeued",
              t["todo"].get<unsigned long long>(), t["doing"].get<unsigned long long>(),
              t["done"].get<unsigned long long>(), t["failed"].get<unsigned long long>(),
              t["requeued"].get<unsigned long long>());
  const auto epochs = j.value("data_epochs", 0u);  // 0: not known
  if (epochs > 0) std::printf("; data epoch %u/%u", std::min(j.value("data_epoch", 0u) + 1, epochs), epochs);
  std::printf("\n");
  std::string loss = j["loss"].is_number() ? std::to_string(j["loss"].get<double>()) : "-";
  // Workers launched and not in yet: starting, or (Slurm) waiting in the queue for room.
  const auto alive = j["workers_alive"].get<unsigned>(), launched = j.value("workers_launched", 0u);
  const std::string waiting =
      launched > alive ? " (" + std::to_string(launched - alive) + " starting or queued)" : "";
  std::printf("throughput %.0f samples/s, loss %s, %llu samples, workers %u/%u%s, restarts %llu\n",
              j["samples_per_sec"].get<double>(), loss.c_str(), j["samples_total"].get<unsigned long long>(),
              alive, j["workers_target"].get<unsigned>(), waiting.c_str(),
              j["restarts"].get<unsigned long long>());
}

// The job's goodput line (docs/goodput.md), for a job that picks its own batch.
void print_goodput(const nlohmann::json& g) {
  const auto pushed = g.value("push_shards", 0u);
  const std::string shards = pushed > 0 ? " from the pushes " + std::to_string(pushed) +
                                              (pushed == 1 ? " PS shard" : " PS shards") + " received"
                                        : "";
  // Infinite while |G|^2 sits at its floor 0: no measurable gradient signal, a larger batch costs
  // nothing statistically (the JSON's noise_scale is then null, noise_scale_infinite true); null and
  // not infinite once estimated: not a number (diverged gradients).
  const auto ns = g.find("noise_scale");
  char scale[64] = "infinite";
  if (!g.value("noise_scale_infinite", false)) {
    if (ns != g.end() && ns->is_number())
      std::snprintf(scale, sizeof scale, "%.0f samples", ns->get<double>());
    else
      std::snprintf(scale, sizeof scale, "%s",
                    g.value("rounds", 0ull) > 0 ? "unknown (not a number)" : "not estimated yet");
  }
  const auto rounds = g.value("rounds", 0ull);
  std::printf("gradient noise scale %s (%llu estimate%s%s)", scale, rounds, rounds == 1 ? "" : "s",
              shards.c_str());
  // An async_ps job's estimate comes from its shards; its workers step at their own batch, with no
  // global batch, scaled rate or goodput model to show (they read 1 x batch x 1 and 0 samples/s).
  if (pushed > 0) {
    std::printf("\n");
    return;
  }
  const std::string rule = g.value("lr_scaling", std::string("none"));
  char gain[48] = "";
  if (rule == "adascale") std::snprintf(gain, sizeof gain, ", gain %.3g", g.value("gain", 1.0));
  std::printf("; batch %u = %u x %u x %u, lr x%.3g (%s%s); goodput %.0f samples/s", g.value("batch", 0u),
              g.value("replicas", 0u), g.value("local_batch", 0u), g.value("accum_steps", 0u) + 1,
              g.value("lr_factor", 1.0), rule.c_str(), gain, g.value("goodput", 0.0));
  if (g.value("predicted_goodput", 0.0) > 0) std::printf(" (model: %.0f)", g.value("predicted_goodput", 0.0));
  std::printf("\n");
}

// A timeline event's line in `recent events`: its cause or state, a batch choice's sizes and goodput.
std::string event_detail(const nlohmann::json& e) {
  const auto kind = e.value("kind", std::string());
  char line[160];
  // A batch set without a prediction (batch = "global"'s share, one a resize left out of range before
  // any estimate) has predicted goodput 0: not "predicted goodput 0 samples/s".
  const double predicted = e.value("predicted_goodput", 0.0);
  if (kind == "batch") {
    if (predicted > 0)
      std::snprintf(line, sizeof line, "batch %llu -> %llu (predicted goodput %.0f samples/s)",
                    e.value("from", 0ull), e.value("batch", 0ull), predicted);
    else
      std::snprintf(line, sizeof line, "batch %llu -> %llu", e.value("from", 0ull), e.value("batch", 0ull));
    return line;
  }
  if (kind == "batch_measured") {
    std::snprintf(line, sizeof line, "batch %llu: goodput %.0f samples/s measured", e.value("batch", 0ull),
                  e.value("measured_goodput", 0.0));
    std::string text = line;
    if (predicted > 0) text += ", " + std::to_string(static_cast<long long>(predicted + 0.5)) + " predicted";
    return text;
  }
  return e.value("cause", e.value("state", std::string()));
}

void print_table(const nlohmann::json& j) {
  print_summary(j);
  if (j.contains("goodput")) print_goodput(j["goodput"]);
  int width = 10;       // the STATE column, as wide as its longest ("killed by SIGKILL")
  bool placed = false;  // a HOST column where nodes run elsewhere (a pid there is another machine's)
  for (const auto& m : j["members"]) {
    width = std::max(width, static_cast<int>(m["state"].get<std::string>().size()));
    placed = placed || m.contains("host") || m.contains("slurm_job");
  }
  // PID padded only when HOST follows (no trailing blanks otherwise).
  std::printf("%-14s %-8s %-*s %-22s %-*s%s\n", "NODE", "ROLE", width, "STATE", "ADDRESS", placed ? 7 : 0,
              "PID", placed ? " HOST" : "");
  for (const auto& m : j["members"]) {
    const int pid = m["pid"].get<int>();
    std::string where = m.value("host", std::string());
    if (m.contains("slurm_job"))
      where += (where.empty() ? "" : " ") + std::string("(Slurm job ") +
               std::to_string(m.value("slurm_job", 0L)) + ")";
    std::printf("%-14s %-8s %-*s %-22s %-*s%s\n", m["node"].get<std::string>().c_str(),
                m["role"].get<std::string>().c_str(), width, m["state"].get<std::string>().c_str(),
                m["address"].get<std::string>().c_str(), placed ? 7 : 0,
                pid > 0 ? std::to_string(pid).c_str() : "-",
                placed ? (" " + (where.empty() ? std::string("-") : where)).c_str() : "");
  }
  if (j.contains("recent")) {  // the runner is gone: what the timeline says happened last
    std::printf("recent events (%s):\n", j["source"].get<std::string>().c_str());
    for (const auto& e : j["recent"])
      std::printf("  %-14s %-14s %s\n", e["kind"].get<std::string>().c_str(), e.value("node", "").c_str(),
                  event_detail(e).c_str());
  }
}

void print_queued(const control::queued_job& q, bool json) {
  if (json) {
    nlohmann::json j = {
        {"job", q.id}, {"state", "queued"}, {"slurm_job", q.slurm_job}, {"slurm_state", q.state}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf(
      "job %s  queued: its runner (troupe run --submit) is Slurm job %ld, %s; the job directory is "
      "made when it starts\n",
      q.id.c_str(), q.slurm_job, q.state.c_str());
}

const command_registrar status_reg{
    "status", "Show a job: membership, tasks, throughput; how it ended once it has",
    [](CLI::App& sub) -> runner {
      auto t = std::make_shared<target>();
      auto json = std::make_shared<bool>(false);
      add_target(sub, t);
      sub.add_flag("--json", *json, "one JSON object instead of the table");
      return [t, json]() -> int {
        quiet_logs();
        // Its runner queued by `run --submit`: no directory yet.
        if (auto q = control::queued_job_at(t->job_dir); q && !q->resumed) return print_queued(*q, *json), 0;
        auto dir = control::find_job_dir(t->job_dir, t->root);
        if (!dir) return usage_error(dir.err());
        auto s = control::job_status_json(*dir, true);
        if (!s) return run_error(s.err());
        const auto j = nlohmann::json::parse(*s);
        if (*json)
          std::printf("%s\n", s->c_str());
        else if (j.value("state", "") == "starting")  // no nodes yet
          std::printf("job %s  starting (runner pid %d): %s\n", j["job"].get<std::string>().c_str(),
                      j["runner_pid"].get<int>(), j["reason"].get<std::string>().c_str());
        else
          print_table(j);
        return 0;
      };
    }};

const command_registrar scale_reg{
    "scale", "Change the number of workers of a running job", [](CLI::App& sub) -> runner {
      auto t = std::make_shared<target>();
      auto n = std::make_shared<std::uint32_t>(0);
      auto host = std::make_shared<std::string>();
      add_target(sub, t);
      sub.add_option("--workers", *n, "the new number of workers")->required()->check(CLI::Range(0, 16384));
      sub.add_option("--host", *host,
                     "start the workers this adds on this host (a Slurm node of the worker partition, or one "
                     "of cluster.hosts), or, on a shrink, stop the workers running there first (a drain); "
                     "default: where the launcher puts them, and the highest-numbered leave");
      return [t, n, host]() -> int {
        quiet_logs();
        auto dir = control::find_job_dir(t->job_dir, t->root);
        if (!dir) return usage_error(dir.err());
        auto r = control::scale_job(*dir, *n, *host);
        // The runner refused the request (a host not of the job, a job stopping): a usage error,
        // nothing changed; a job not running is exit 1, as for stop.
        if (!r) return r.err() == core_errc::out_of_range ? usage_error(r.err()) : run_error(r.err());
        // A target clamped to the job's bounds is said (it printed the bound as if asked).
        const auto id = job_id_of(*dir);
        if (r->note.empty())
          std::printf("job %s: workers: %u\n", id.c_str(), r->workers);
        else
          std::printf("job %s: workers: %u (asked %u: %s)\n", id.c_str(), r->workers, *n, r->note.c_str());
        return 0;
      };
    }};

const command_registrar stop_reg{
    "stop", "Stop a running job (its nodes exit; the job directory stays)", [](CLI::App& sub) -> runner {
      auto t = std::make_shared<target>();
      add_target(sub, t);
      return [t]() -> int {
        quiet_logs();
        // Its runner still queued: cancelled, the job never starts.
        auto cancelled = control::cancel_queued_job(t->job_dir);
        if (!cancelled) return run_error(cancelled.err());
        if (const auto& q = *cancelled) {
          std::printf("stopped job %s: its runner, Slurm job %ld (%s), was cancelled before it %s\n",
                      q->id.c_str(), q->slurm_job, q->state.c_str(), q->resumed ? "resumed it" : "started");
          return 0;
        }
        auto dir = control::find_job_dir(t->job_dir, t->root);
        if (!dir) return usage_error(dir.err());
        if (auto r = control::stop_job(*dir); !r) return run_error(r.err());
        std::printf("stopped job %s (%s)\n", job_id_of(*dir).c_str(), dir->c_str());
        return 0;
      };
    }};

}  // namespace
}  // namespace troupe::cli
