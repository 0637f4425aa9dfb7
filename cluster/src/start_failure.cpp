#include "troupe/cluster/start_failure.hpp"

#include <signal.h>

#include <algorithm>
#include <vector>

namespace troupe::cluster {

bool ran_as_node(const exit_status& s, const node_id& id) {
  std::string tag(1, '[');  // appended, not "[" + ...: GCC 12 warns -Wrestrict on that
  tag.append(id.to_string()).append(1, ']');
  return s.trace.output.find(tag) != std::string::npos;
}

bool start_failure(const exit_status& s, const node_id& id, bool fenced) {
  if (fenced || s.state.rfind("PREEMPTED", 0) == 0 || s.state.rfind("CANCELLED", 0) == 0) return false;
  // Killed from outside (troupe chaos, an operator, the OOM killer): it may well have been starting.
  if (s.state.empty() && (s.signal == SIGKILL || s.signal == SIGTERM || s.signal == SIGINT)) return false;
  if (s.state.empty() && s.code == -1) return false;  // reaped by someone else: nothing known
  if (could_not_join(s)) return true;
  return !ran_as_node(s, id);
}

namespace {

// The last lines of a node's output on one line: at most 3 lines and 400 characters.
std::string output_tail(const std::string& output) {
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < output.size();) {
    auto nl = output.find('\n', at);
    auto line = output.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (!line.empty()) lines.push_back(std::move(line));
    at = nl == std::string::npos ? output.size() : nl + 1;
  }
  std::string out;
  for (std::size_t i = lines.size() > 3 ? lines.size() - 3 : 0; i < lines.size(); ++i)
    out.append(out.empty() ? "" : " | ").append(lines[i]);
  constexpr std::size_t limit = 400;
  return out.size() > limit ? "..." + out.substr(out.size() - limit) : out;
}

std::string how_it_ended(const start_failure_report& r) {
  const auto& s = r.status;
  const std::string times = std::to_string(r.times) + " time" + (r.times == 1 ? "" : "s") + " in a row";
  if (r.backend == "slurm") {
    std::string text = "its Slurm job ended " + (s.state.empty() ? std::string("UNKNOWN") : s.state) + " (";
    if (!s.trace.reason.empty()) text += "reason " + s.trace.reason + ", ";
    text += "ExitCode " + std::to_string(s.code) + ":" + std::to_string(s.signal) + ")";
    if (!r.host.empty()) text += " on " + r.host;
    return text + ", " + times + " (the last: Slurm job " + std::to_string(r.slurm_job) + ")";
  }
  if (!r.host.empty()) return "its command on host " + r.host + " " + s.to_string() + ", " + times;
  return "its process " + s.to_string() + ", " + times;
}

}  // namespace

std::string describe(const start_failure_report& r) {
  std::string text = r.id.name + (r.id.name == "master" ? " never came up: " : " never joined the master: ") +
                     how_it_ended(r);
  const auto& t = r.status.trace;
  if (could_not_join(r.status) && !t.output.empty()) {  // troupe said why
    const auto why = last_logged_error(r.status);
    return text + "; its last error (" + r.log_path + "): " + (why.empty() ? output_tail(t.output) : why) +
           "; check: does the node's host reach the master's address ([cluster] advertise, a firewall, the "
           "host's network)?";
  }
  if (t.log_missing)
    text += ", before troupe started in it: its log " + r.log_path + " was never written here";
  else if (t.log_bytes == 0 || t.output.empty())
    text += ", before troupe started in it: it wrote nothing to its log " + r.log_path;
  else
    text += "; its output (" + r.log_path + ") ends: " + output_tail(t.output);
  // A host command's own failure (ssh to a host gone) first: it never reached the host at all.
  if (r.backend != "slurm" && !r.host.empty())
    text += "; check: does [cluster] host_command reach host " + r.host + "?";
  if (r.backend == "slurm" || !r.host.empty())
    text += std::string(r.backend == "slurm" ? "; check:" : "") +
            " is the job directory on a filesystem the nodes share? is the troupe binary at " + r.program +
            " on the node?";
  return text;
}

namespace {
// An error line that only reports an earlier one's consequence: a supervisor giving up on a child
// that kept failing, the node's root supervisor exiting.
bool consequence(std::string_view line) {
  return line.find("' needed more than ") != std::string_view::npos ||
         line.find("root supervisor exited") != std::string_view::npos;
}

// "E [worker-0#0] model: ..." -> "model: ...": the level letter and the node's own tag say nothing
// in a reason that names the node already.
std::string message_of(std::string line) {
  std::size_t from = 2;
  if (line.size() > from && line[from] == '[') {
    const auto close = line.find("] ", from);
    if (close != std::string::npos) from = close + 2;
  }
  return line.substr(std::min(from, line.size()));
}
}  // namespace

std::string last_logged_error(const exit_status& s) {
  // "YYYY-MM-DD HH:MM:SS.mmm " is 24 characters; the level letter follows.
  constexpr std::size_t level_at = 24;
  const auto& out = s.trace.output;
  std::string last;
  std::size_t end = out.size();
  while (end > 0) {
    const auto nl = out.rfind('\n', end - 1);
    const std::size_t begin = nl == std::string::npos ? 0 : nl + 1;
    // CAF's own report of an exception an actor threw (on stderr, so in the node's log): "*** unhandled
    // exception: [id: 9, name: ..., exception typeid: ...]: <what>", the cause a supervisor's giving
    // up follows.
    constexpr std::string_view caf_unhandled = "*** unhandled exception: ";
    if (std::string_view(out).substr(begin, end - begin).starts_with(caf_unhandled)) {
      auto line = out.substr(begin, end - begin);
      auto what = line.find("]: ");
      return line.substr(what == std::string::npos ? caf_unhandled.size() : what + 3, 400);
    }
    if (end - begin > level_at + 2 && (out[begin + level_at] == 'E' || out[begin + level_at] == 'C') &&
        out[begin + level_at + 1] == ' ') {
      auto line =
          message_of(out.substr(begin + level_at, std::min<std::size_t>(end - begin - level_at, 400)));
      // The cause, not its consequences (a dispenser that cannot open its records, then its
      // supervisor giving up on it: the user needs the first).
      if (!consequence(line)) return line;
      if (last.empty()) last = std::move(line);
    }
    if (nl == std::string::npos) break;
    end = nl;
  }
  return last;
}

}  // namespace troupe::cluster
