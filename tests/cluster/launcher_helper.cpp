// A test helper process for the no-orphan tests. Usage:
//   cluster_test_helper spawn N PIDFILE [exit]
// starts N `sleep 1000` nodes with the local launcher, writes "<pid of self>\n<pid>\n..." to PIDFILE
// atomically, then either sleeps until killed or, with "exit", leaves with _exit(0) at once
// (skipping the launcher's destructor, as a crash would).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "troupe/cluster/job_dir.hpp"
#include "troupe/cluster/local/launcher.hpp"

int main(int argc, char** argv) {
  using namespace troupe::cluster;
  if (argc < 4 || std::string(argv[1]) != "spawn") {
    std::fprintf(stderr, "usage: %s spawn N PIDFILE [exit]\n", argv[0]);
    return 2;
  }
  int n = std::atoi(argv[2]);
  std::string pidfile = argv[3];
  bool exit_at_once = argc > 4 && std::string(argv[4]) == "exit";
  auto l = local_launcher::create({});
  if (!l) {
    std::fprintf(stderr, "%s\n", l.err().to_string().c_str());
    return 1;
  }
  std::string pids = std::to_string(::getpid()) + "\n";
  for (int i = 0; i < n; ++i) {
    node_spec spec;
    spec.id = {"sleeper-" + std::to_string(i), 0};
    spec.program = "/bin/sleep";
    spec.argv = {"sleep", "1000"};
    auto h = (*l)->launch(spec);
    if (!h) {
      std::fprintf(stderr, "%s\n", h.err().to_string().c_str());
      return 1;
    }
    pids += std::to_string(h->pid) + "\n";
  }
  if (auto ok = write_file_atomic(pidfile, pids); !ok) {
    std::fprintf(stderr, "%s\n", ok.err().to_string().c_str());
    return 1;
  }
  if (exit_at_once) ::_exit(0);
  for (;;) ::pause();
}
