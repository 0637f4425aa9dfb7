// `troupe chaos`: inject faults into a running job (or one it starts) and report how it coped.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "troupe/cluster/config.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/control/chaos.hpp"
#include "troupe/control/client.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/core/config.hpp"
#include "troupe/job/job_file.hpp"
#include "troupe/job/job_spec.hpp"

namespace troupe::cli {
namespace {

struct flags {
  std::string job_dir, root = "jobs", job_file, job_id, schedule, report;
  std::vector<std::string> sets, faults, kinds{"kill"}, targets{"worker", "ps", "master"};
  control::random_faults rnd;
  bool random = false;
  double settle = 30;
};

volatile std::sig_atomic_t interrupted = 0;
void on_signal(int) {
  interrupted = 1;
}

// `troupe run` started through a launcher: its own process group, killed if this process dies.
struct job_process {
  std::unique_ptr<cluster::launcher> launcher;
  cluster::node_handle handle;
  bool forwarded = false;  // ^C / SIGTERM passed on as SIGTERM (the runner stops its nodes)

  // The runner's exit code once it has exited (128 + signal when killed), nullopt while it runs.
  std::optional<int> exit_code() {
    forward_interrupt();
    auto st = launcher->poll(handle);
    if (!st) return 1;
    if (!*st) return std::nullopt;
    return code_of(**st);
  }

  // The same, waiting up to `bound` for the runner's exit (which ends the wait at once). The bound
  // is how soon a ^C received meanwhile is passed on: a signal handler cannot end the wait.
  std::optional<int> wait_exit(std::chrono::milliseconds bound) {
    forward_interrupt();
    auto st = launcher->wait(handle, bound);
    if (st) return code_of(*st);
    if (st.err() == cluster::cluster_errc::timed_out) return std::nullopt;
    return 1;
  }

 private:
  void forward_interrupt() {
    if (interrupted && !forwarded) forwarded = static_cast<bool>(launcher->signal(handle, SIGTERM));
  }
  static int code_of(const cluster::exit_status& st) { return st.signaled() ? 128 + st.signal : st.code; }
};

// Starts `troupe run` (this binary) for the job file; its job directory is <job.root>/<id>.
expected<job_process> start_job(const flags& f, std::string& job_dir) {
  auto doc = job::read_job_file(f.job_file);  // root relative to the job file, as the runner reads it
  if (!doc) return doc.err();
  // The job's root as its runner will see it: --set job.root=... included.
  for (const auto& s : f.sets)
    if (auto o = doc->apply_override(s); !o) return o.err();
  config_reader reader(*doc);
  std::string root = reader.section("job").get_string("root", "jobs");
  std::string id = f.job_id.empty()
                       ? "chaos-" + std::to_string(::time(nullptr)) + "-" + std::to_string(::getpid())
                       : f.job_id;
  job_dir = root + "/" + id;
  cluster::node_spec spec;
  spec.id = {"runner", 0};
  spec.argv = {"troupe", "run", f.job_file, "--job-id", id, "--quiet"};
  for (const auto& s : f.sets) spec.argv.insert(spec.argv.end(), {"--set", s});
  auto l = cluster::make_launcher(cluster::cluster_config{}, nullptr);
  if (!l) return l.err();
  auto h = (*l)->launch(spec);
  if (!h) return h.err();
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  return job_process{std::move(*l), *h};
}

// Waits (up to a minute) until the job has a nodes.json (its runner is up), or the runner exits.
// Nothing tells this process when the file appears: it is looked for between waits of 50 ms on the
// runner's exit.
bool wait_nodes(const std::string& job_dir, job_process& job) {
  auto& clk = clock::system();
  const auto deadline = clk.now() + std::chrono::minutes(1);
  while (!std::filesystem::exists(job_dir + "/nodes.json"))
    if (clk.now() >= deadline || job.wait_exit(std::chrono::milliseconds(50))) return false;
  return true;
}

// A number of seconds: finite, 0 to a year (CLI::Range lets NaN through, and took -1 and inf).
CLI::Validator seconds() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::size_t used = 0;
        double v = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == text.size() && std::isfinite(v) && v >= 0 && v <= 365 * 86400.0) return "";
        return "'" + text + "': a number of seconds from 0 to a year";
      },
      "SECONDS");
}

// --rate's faults: each --kinds and --targets word named as the flag's (it quoted a fault the user
// never wrote: "fault '0 bogus host rate=1gbit': ..."); a window that is empty, or that the rate
// draws nothing in, said so when --rate's are the only faults (both read "no faults: give --fault,
// --schedule or --rate"); beside --fault or --schedule they are nothing more.
expected<std::vector<control::fault_spec>> random_faults_of(flags& f, bool alone) {
  f.rnd.kinds.clear();
  for (const auto& k : f.kinds) {
    auto p = control::parse_fault_kind(k);
    if (!p) return std::move(p).err().wrap("--kinds " + k);
    f.rnd.kinds.push_back(*p);
  }
  for (const auto& t : f.targets)
    if (auto c = control::check_fault_target(t); !c) return std::move(c).err().wrap("--targets " + t);
  f.rnd.targets = f.targets;
  const auto num = [](double x) { return fmt::format("{:g}", x); };
  if (f.rnd.duration_s <= f.rnd.start_s && !alone) return std::vector<control::fault_spec>{};
  if (f.rnd.duration_s <= f.rnd.start_s)
    return make_unexpected(core_errc::invalid_argument,
                           "--rate: random faults fall between --start and --duration, and --duration " +
                               num(f.rnd.duration_s) + " s is not after --start " + num(f.rnd.start_s) +
                               " s");
  // Drawn into memory: --duration inf (or 1e12) grew without end, 4 GB in 6 s, and never returned.
  constexpr double most = 100'000;
  if (f.rnd.rate * (f.rnd.duration_s - f.rnd.start_s) > most)
    return make_unexpected(core_errc::invalid_argument,
                           "--rate " + num(f.rnd.rate) + " over " + num(f.rnd.duration_s - f.rnd.start_s) +
                               " s draws more than " + num(most) + " faults: give a shorter --duration");
  auto r = control::random_schedule(f.rnd);
  if (r.empty() && alone)
    return make_unexpected(core_errc::invalid_argument,
                           "--rate " + num(f.rnd.rate) + " drew no fault between " + num(f.rnd.start_s) +
                               " s and " + num(f.rnd.duration_s) + " s (seed " + std::to_string(f.rnd.seed) +
                               "): give a higher --rate or a later --duration");
  return r;
}

expected<std::vector<control::fault_spec>> faults_of(flags& f) {
  std::vector<control::fault_spec> out;
  if (!f.schedule.empty()) {
    auto s = control::read_schedule(f.schedule);
    if (!s) return s.err();
    out = *s;
  }
  for (const auto& t : f.faults) {
    auto p = control::parse_fault(t);
    if (!p) return p.err();
    out.push_back(*p);
  }
  if (f.random) {
    auto r = random_faults_of(f, out.empty());
    if (!r) return r.err();
    out.insert(out.end(), r->begin(), r->end());
  }
  if (out.empty())
    return make_unexpected(core_errc::invalid_argument, "no faults: give --fault, --schedule or --rate");
  return out;
}

// A fault the job cannot take, known from its file: `preempt` on a job Slurm does not launch, a PS
// shard past [ps] shards (their indices are fixed). They were found only when due, and skipped.
expected<void> check_node_faults(const std::vector<control::fault_spec>& faults, const job::job_spec& spec) {
  const auto& launcher = spec.cluster.launcher;
  const auto shards = spec.uses_ps() ? static_cast<long long>(spec.ps.shards) : 0;
  for (const auto& x : faults) {
    const std::string what = std::string("fault '") + control::to_string(x.kind) + " " + x.target + "'";
    if (x.kind == control::fault_kind::preempt && launcher != "slurm")
      return make_unexpected(core_errc::invalid_argument,
                             what +
                                 ": preemption takes a node the Slurm launcher started; this job's "
                                 "cluster.launcher is '" +
                                 launcher + "'");
    if (x.target.rfind("ps-", 0) == 0 && std::strtoll(x.target.c_str() + 3, nullptr, 10) >= shards)
      return make_unexpected(core_errc::invalid_argument,
                             what + ": the job has " + std::to_string(shards) + " PS shard(s) (" +
                                 (spec.uses_ps() ? "ps.shards" : "its strategy keeps none") + ")");
  }
  return {};
}

// The job the faults go to: the job file with its --set overrides, or the running job's job.toml;
// host faults and the faults above are checked against it before anything starts.
expected<void> check_hosts(const flags& f, const std::vector<control::fault_spec>& faults,
                           const std::string& dir) {
  auto doc = config_doc::from_file(f.job_file.empty() ? dir + "/job.toml" : f.job_file);
  if (!doc) return doc.err();
  for (const auto& s : f.sets)
    if (auto r = doc->apply_override(s); !r) return r.err();
  auto spec = job::job_spec::read(*doc);
  if (!spec) return spec.err();
  if (auto c = check_node_faults(faults, *spec); !c) return c;
  return control::check_host_faults(faults, spec->cluster);
}

// The faults to inject and, without --job-file, the running job's directory (with --job-file,
// start_job fills it in). Errors are the user's.
expected<control::chaos_options> chaos_options_of(flags& f) {
  auto faults = faults_of(f);
  if (!faults) return faults.err();
  control::chaos_options o;
  if (f.job_file.empty()) {
    auto dir = control::find_job_dir(f.job_dir, f.root);
    if (!dir) return dir.err();
    o.job_dir = *dir;
  }
  if (auto c = check_hosts(f, *faults, o.job_dir); !c) return c.err();
  o.faults = *faults;
  o.settle_s = f.settle;
  o.verbose = true;
  return o;
}

// The job's result.json (when it wrote one) into the report, whose summary is printed and whose
// JSON goes to --report.
void print_report(control::chaos_report& rep, const std::string& job_dir, const std::string& report_path) {
  std::ifstream in(job_dir + "/result.json");
  std::stringstream ss;
  ss << in.rdbuf();
  rep.job_result = ss.str();
  std::printf("%s", rep.summary_table().c_str());
  if (!report_path.empty()) std::ofstream(report_path) << rep.to_json() << "\n";
}

// --job-dir of a job that ended before the chaos began ("" when it runs, or may): every fault read
// "job over before the fault was due", exit 0.
// A job whose runner died is none either (it read as a job that ended meanwhile, exit 0).
std::string ended_before(const std::string& job_dir) {
  auto dir = cluster::job_dir::open(job_dir);
  std::error_code ec;
  if (!dir || dir->runner_pid() || !std::filesystem::exists(dir->lock_path(), ec)) return {};
  const auto status = control::ended_as(job_dir);
  return "job " + dir->job_id() + " is not running: " +
         (status.empty() ? "its runner died (continue it: troupe run --resume " + dir->path() + ")"
                         : "it ended (" + status + ", " + dir->result_path() + ")") +
         " before the chaos began; give a running job's --job-dir, or --job FILE to start one";
}

int run(flags& f) {
  // Its own connection chatter is for --log-level debug; fault lines are warnings.
  if (spdlog::get_level() == spdlog::level::info) spdlog::set_level(spdlog::level::warn);
  auto o = chaos_options_of(f);
  if (!o) return usage_error(o.err());
  if (f.job_file.empty())
    if (auto why = ended_before(o->job_dir); !why.empty())
      return run_error(error(make_error_code(core_errc::invalid_argument), why));
  std::optional<job_process> job;
  std::optional<int> code;
  if (!f.job_file.empty()) {
    auto started = start_job(f, o->job_dir);
    if (!started) return usage_error(started.err());
    job = std::move(*started);
    if (!wait_nodes(o->job_dir, *job))
      return run_error(error(make_error_code(core_errc::io_error), "the job did not start: " + o->job_dir));
    o->job_running = [&] {
      if (!code) code = job->exit_code();
      return !code;
    };
  }
  auto rep = control::run_chaos(*o);
  if (!rep) return run_error(rep.err());
  while (job && !code) code = job->wait_exit(std::chrono::milliseconds(50));
  rep->job_exit_code = code;
  print_report(*rep, o->job_dir, f.report);
  return code.value_or(0) == 0 ? 0 : 1;
}

const command_registrar reg{
    "chaos",
    "Inject faults (kill, stop, drop, delay; host kill, partition, throttle) into a job and report detection "
    "and recovery",
    [](CLI::App& sub) -> runner {
      auto f = std::make_shared<flags>();
      sub.add_option("--job-dir", f->job_dir,
                     "the running job's directory (default: the newest under --root)");
      auto* root = sub.add_option("--root", f->root,
                                  "where job directories are (default: jobs; with --job: its job.root)");
      sub.add_option("--job", f->job_file, "start this job file with `troupe run` and inject into it")
          ->check(CLI::ExistingFile);
      sub.add_option("--job-id", f->job_id, "with --job: the job directory name");
      sub.add_option("--set", f->sets, "with --job: override a key (repeatable)");
      sub.add_option("--schedule", f->schedule,
                     "TOML file with [chaos] faults = [\"T KIND TARGET ...\", ...]")
          ->check(CLI::ExistingFile);
      sub.add_option("--fault", f->faults,
                     "\"T KIND TARGET [hold=S] [p=P] [us=N] [rate=R]\", e.g. \"3 kill worker\", \"5 "
                     "partition host:h2 hold=5\" "
                     "(repeatable)");
      auto* rate =
          sub.add_option("--rate", f->rnd.rate, "random faults per second")->check(CLI::Range(0.001, 100.0));
      sub.add_option("--seed", f->rnd.seed, "random schedule seed (default 1)");
      sub.add_option("--duration", f->rnd.duration_s, "random faults until this many seconds (default 10)")
          ->check(seconds());
      sub.add_option("--start", f->rnd.start_s, "no random fault before this many seconds (default 1)")
          ->check(seconds());
      sub.add_option("--kinds", f->kinds, "random fault kinds (default kill)")->delimiter(',');
      sub.add_option("--targets", f->targets,
                     "random targets: roles or node names (default worker,ps,master)")
          ->delimiter(',');
      sub.add_option("--hold", f->rnd.hold_s, "random stop/drop/delay faults last this long (default 1 s)")
          ->check(seconds());
      sub.add_option("--settle", f->settle,
                     "after the last fault, wait this long for recovery (default 30 s)")
          ->check(seconds());
      sub.add_option("--report", f->report, "write the JSON report here");
      return [f, rate, root]() -> int {
        f->random = rate->count() > 0;
        // With --job, the root the job goes under, as `troupe run --root` (it was not passed on: the
        // job went to its file's job.root).
        if (root->count() > 0 && !f->job_file.empty()) f->sets.push_back(root_override(f->root));
        return run(*f);
      };
    }};

}  // namespace
}  // namespace troupe::cli
