// What the Slurm launcher's caller asks of a node, fence() and signal(), is recorded here and sent
// by the watcher thread (send_asked) after a look at the queue that squeue answered: the caller is
// the runner's loop, which must not wait on a controller that does not answer (a fence retried
// scancel there for 20 s of an outage: no progress line, no node handled), and while it does not,
// the asks wait for it and go out when it answers. A fence supersedes the signals asked before it.
#include <signal.h>

#include "slurm/launcher_impl.hpp"
#include "troupe/cluster/errc.hpp"

namespace troupe::cluster::slurm {

expected<void> launcher::impl::ask(const node_handle& h, const std::function<void(node&)>& what) {
  {
    std::lock_guard lock(mu);
    auto it = nodes.find(h.serial);
    if (it == nodes.end() || it->second.final)
      return make_unexpected(cluster_errc::no_such_node,
                             "node " + h.id.to_string() + " (Slurm job " + std::to_string(h.pid) + ")");
    what(it->second);
    asks_due = true;
  }
  cv.notify_all();
  return {};
}

bool launcher::impl::send_signal(long job, int sig, const std::string& state) const {
  // SIGKILL, or any signal to a job not started: a cancel. Otherwise to the batch shell (the node,
  // which it exec'd) and its steps.
  std::vector<std::string> argv = {"scancel"};
  if (sig != SIGKILL && state != "PENDING")
    argv.insert(argv.end(), {"--full", "--signal=" + std::to_string(sig)});
  argv.push_back(std::to_string(job));
  return taken(tool(argv));
}

void launcher::impl::send_asked() {
  struct asked {
    node_handle h;
    std::string state;
    bool fence;
    std::vector<int> signals;
  };
  std::vector<asked> todo;
  {
    std::lock_guard lock(mu);
    for (auto& [s, n] : nodes)
      if (!n.final && (n.fence || !n.signals.empty()))
        todo.push_back({n.h, n.state, n.fence, n.fence ? std::vector<int>{} : std::move(n.signals)});
  }
  for (auto& a : todo) {
    if (a.fence) {
      auto done = fence_job(a.h.pid, so);
      std::lock_guard lock(mu);
      auto& n = nodes[a.h.serial];
      if (done) {
        n.fence = false;
        n.signals.clear();
      } else {
        last_error = "fence " + a.h.id.to_string() + ": " + done.err().to_string() + "; again";
      }
      continue;
    }
    std::size_t sent = 0;
    while (sent < a.signals.size() && send_signal(a.h.pid, a.signals[sent], a.state)) ++sent;
    if (sent == a.signals.size()) continue;
    std::lock_guard lock(mu);  // the rest, before any asked meanwhile, at the next look
    auto& later = nodes[a.h.serial].signals;
    later.insert(later.begin(), a.signals.begin() + static_cast<std::ptrdiff_t>(sent), a.signals.end());
  }
}

expected<void> launcher::signal(const node_handle& h, int sig) {
  return impl_->ask(h, [sig](impl::node& n) { n.signals.push_back(sig); });
}

expected<void> launcher::fence(const node_handle& h) {
  return impl_->ask(h, [](impl::node& n) { n.fence = true; });
}

}  // namespace troupe::cluster::slurm
