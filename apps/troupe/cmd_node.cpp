// `troupe node`: one node of a job, started by `troupe run` (not usually by hand).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "command.hpp"
#include "troupe/actors/node.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/core/clock.hpp"

namespace troupe::cli {
namespace {

void add_flags(CLI::App& sub, actors::node_options& o) {
  sub.add_option("--job-dir", o.job_dir, "the job's directory")->required()->check(CLI::ExistingDirectory);
  sub.add_option("--role", o.role, "master, ps or worker")
      ->required()
      ->check(CLI::IsMember({"master", "ps", "worker"}));
  sub.add_option("--index", o.index, "ps-<index> / worker-<index>");
  sub.add_option("--incarnation", o.incarnation, "restart count of this node");
  sub.add_option("--slot", o.slot,
                 "a worker's place among the running workers (GPU = slot % "
                 "devices; default: its index)")
      ->check(CLI::Range(0L, 1L << 20));
  sub.add_option("--listen", o.listen, "host:port to listen on (port 0: any)");
  sub.add_option("--join", o.join, "the master's host:port (ps and worker)");
  sub.add_option("--advertise", o.advertise,
                 "this host's IPv4 address to listen on and give the others "
                 "(a node started by hand on another host)");
  sub.add_option("--connect-timeout", o.connect_timeout_s,
                 "seconds to keep dialling the master at --join (default 30)")
      ->check(CLI::Range(0.1, 3600.0));
  sub.add_option("--train", o.train_dir, "training record store")->required();
  sub.add_option("--test", o.test_dir, "test record store")->required();
  sub.add_flag("--standby", o.standby,
               "preload the job's model, then wait for this node's identity on stdin (started by the "
               "runner's launcher; docs/models.md)");
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A node started by hand for a job that is over: its result.json written and its runner's beat
// (runner.beat, rewritten every second while a runner runs: a resumed job keeps its earlier run's
// result.json) still for 1.5 s. It dialled the master for --connect-timeout and then said the master
// could not be reached.
bool job_over(const std::string& job_dir) {
  std::error_code ec;
  if (!std::filesystem::exists(job_dir + "/result.json", ec)) return false;
  const auto beat = cluster::runner_beat_path(job_dir);
  const auto before = read_text(beat);
  troupe::clock::system().sleep_for(std::chrono::milliseconds(1500));
  return read_text(beat) == before;
}

int start(actors::node_options& o) {
  if (o.role != "master" && o.join.empty()) return usage_error("--join is required for role " + o.role);
  if (auto c = o.join.rfind(':');
      o.role != "master" && (c == std::string::npos || c == 0 || c + 1 == o.join.size()))
    return usage_error("--join '" + o.join + "': expected HOST:PORT");
  o.by_hand = std::getenv("TROUPE_NODE") == nullptr;
  if (o.by_hand && o.role != "master" && job_over(o.job_dir))
    return run_error(
        error(core_errc::invalid_argument, "job " + o.job_dir +
                                               " is over (its result.json is written, its runner gone): "
                                               "nothing to join"));
  return actors::run_node(o);
}

// A standby: preloads, waits for its identity, then runs as the `troupe node` command line it was
// given (argv[1] == "node").
int start_standby(const actors::node_options& standby) {
  std::string note;
  auto argv = actors::become_node(standby, note);
  if (!argv) return run_error(argv.err());
  if (argv->size() < 2 || (*argv)[1] != "node")
    return usage_error("a standby's identity must be a `troupe node` command");
  actors::node_options o;
  CLI::App app{"troupe node"};
  add_flags(app, o);
  std::vector<const char*> args;
  for (std::size_t i = 1; i < argv->size(); ++i) args.push_back((*argv)[i].c_str());
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    return usage_error(std::string("the standby's identity: ") + e.what());
  }
  if (o.standby) return usage_error("a standby's identity must not ask for another standby");
  o.standby_note = note;
  return start(o);
}

const command_registrar reg{"node", "Run one node of a job (started by 'troupe run'; see docs/job.md)",
                            [](CLI::App& sub) -> runner {
                              auto o = std::make_shared<actors::node_options>();
                              add_flags(sub, *o);
                              return [o]() -> int { return o->standby ? start_standby(*o) : start(*o); };
                            }};

}  // namespace
}  // namespace troupe::cli
