// `troupe dashboard [--root DIR] [--listen ADDR] [--token-file F]`: serves the web dashboard over
// every job under the jobs root until SIGINT or SIGTERM. Loopback by default; any other address
// needs the cluster token ($TROUPE_CLUSTER_TOKEN, as every node reads it, or --token-file), and every
// request must carry it.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "command.hpp"
#include "troupe/cluster/run_tool.hpp"
#include "troupe/control/client.hpp"
#include "troupe/core/signal_wait.hpp"
#include "troupe/observe/dashboard.hpp"
#include "troupe/transport/config.hpp"

namespace troupe::cli {
namespace {

struct options {
  std::string root = "jobs";  // as every other command
  std::string listen = "127.0.0.1:8265";
  std::string token_file;
};

expected<std::string> read_token(const options& o) {
  if (!o.token_file.empty()) {
    std::ifstream in(o.token_file);
    std::string t;
    if (!in || !std::getline(in, t) || t.empty())
      return make_unexpected(core_errc::io_error,
                             "--token-file " + o.token_file + ": cannot read a token from it");
    return t;
  }
  // The nodes' variable (transport.token_env's default); TROUPE_TOKEN, which the dashboard read alone
  // before 2026-11-30, still works.
  const char* env = std::getenv(default_token_env);
  if (!env || !*env) env = std::getenv("TROUPE_TOKEN");
  return std::string(env ? env : "");
}

// The cluster page's sinfo and sacct: bounded (the server's thread waits on them), and every
// failure a message for the page.
expected<std::string> slurm_command(const std::vector<std::string>& argv) {
  auto r = cluster::run_tool(argv, "", std::chrono::seconds(5), 8 << 20);
  if (!r) return r.err();
  if (r->code != 0)
    return make_unexpected(core_errc::io_error,
                           "exit " + std::to_string(r->code) + ": " + r->err.substr(0, 400));
  return std::move(r->out);
}

// Scale and stop through the control client, as `troupe scale` / `troupe stop` do; a stop answers
// once the runner has it, not when the job has ended (the page polls the job's state).
expected<observe::control_answer> change_job(const std::string& job_dir, int workers,
                                             const std::string& who) {
  if (workers < 0) {
    if (auto s = control::request_stop(job_dir, who); !s) return s.err();
    return observe::control_answer{};
  }
  auto n = control::scale_job(job_dir, static_cast<std::uint32_t>(workers));
  if (!n) return n.err();
  return observe::control_answer{static_cast<int>(n->workers), n->note};
}

int serve(const options& o) {
  if (auto r = control::check_jobs_root(o.root); !r) return usage_error(r.err().context());
  auto token = read_token(o);
  if (!token) return usage_error(token.err());
  // Resolved once: what is checked for loopback is what is bound.
  auto listen = observe::resolve_listen(o.listen);
  if (!listen) return usage_error("--listen: " + listen.err().context());
  bool open_to_network = !observe::is_loopback(*listen);
  if (open_to_network && token->empty())
    return usage_error("--listen " + o.listen +
                       " is beyond loopback: the dashboard then needs the cluster token "
                       "($TROUPE_CLUSTER_TOKEN or --token-file)");
  signal_waiter stop{SIGINT, SIGTERM};
  ::setenv("SLURM_TIME_FORMAT", "%s", 1);  // sacct's times as Unix seconds, whatever the local zone
  observe::http_options ho;
  ho.listen = *listen;
  ho.threads = observe::dashboard_threads;
  observe::dashboard_options d{o.root, *token, open_to_network, change_job, slurm_command};
  auto server = observe::http_server::start(ho, observe::make_dashboard(std::move(d)));
  if (!server) return usage_error("--listen: " + server.err().describe());
  std::printf("troupe dashboard: http://%s/ (jobs under %s)\n", (*server)->address().c_str(), o.root.c_str());
  std::fflush(stdout);
  stop.wait();
  return 0;
}

const command_registrar reg{
    "dashboard", "Serve a web dashboard of every job under the jobs root", [](CLI::App& sub) -> runner {
      auto o = std::make_shared<options>();
      sub.add_option("--root", o->root, "jobs root (default jobs)");
      sub.add_option("--listen", o->listen,
                     "host:port, the host an IP address or a name (default 127.0.0.1:8265)");
      sub.add_option("--token-file", o->token_file, "file holding the cluster token");
      return [o]() -> int { return serve(*o); };
    }};

}  // namespace
}  // namespace troupe::cli
