#include "slurm/commands.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>

#include "troupe/cluster/errc.hpp"

namespace troupe::cluster::slurm {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string first_line(const std::string& s) {
  auto end = s.find('\n');
  auto line = s.substr(0, end);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

std::string said(const tool_result& r) {
  if (r.err.find_first_not_of(" \n") == std::string::npos) return first_line(r.out);
  std::vector<std::string> lines;
  std::size_t at = 0;
  while (at < r.err.size()) {
    auto end = r.err.find('\n', at);
    auto line = first_line(r.err.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (!line.empty()) lines.push_back(line);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  std::string out;
  for (std::size_t i = lines.size() > 3 ? lines.size() - 3 : 0; i < lines.size(); ++i)
    out.append(out.empty() ? "" : "; ").append(lines[i]);
  return out;
}

std::vector<std::string> sbatch_argv(const node_spec& spec, const std::string& program, const options& so) {
  std::vector<std::string> a = {"sbatch",
                                "--parsable",
                                "--no-requeue",
                                "-J",
                                so.job_name_prefix + ":" + spec.id.name,
                                "-N",
                                "1",
                                "-n",
                                "1",
                                "--signal=B:TERM@" + std::to_string(so.term_grace_seconds)};
  const auto& partition = spec.spare && !so.spare_partition.empty()          ? so.spare_partition
                          : spec.preemptible && !so.worker_partition.empty() ? so.worker_partition
                                                                             : so.partition;
  if (!partition.empty()) a.insert(a.end(), {"-p", partition});
  if (!spec.host.empty()) a.insert(a.end(), {"-w", spec.host});
  if (!so.account.empty()) a.insert(a.end(), {"-A", so.account});
  if (!so.qos.empty()) a.insert(a.end(), {"-q", so.qos});
  if (!so.time_limit.empty()) a.insert(a.end(), {"-t", so.time_limit});
  if (spec.need.cpus > 0)
    a.push_back("--cpus-per-task=" + std::to_string(static_cast<int>(std::ceil(spec.need.cpus))));
  if (spec.need.memory_bytes > 0)
    a.push_back("--mem=" + std::to_string((spec.need.memory_bytes + (1 << 20) - 1) >> 20) + "M");
  if (spec.need.gpus > 0) a.push_back("--gres=gpu:" + std::to_string(spec.need.gpus));
  a.push_back("--output=" + (spec.log_file.empty() ? std::string("/dev/null") : spec.log_file));
  a.push_back("--open-mode=append");
  if (!spec.working_dir.empty()) a.push_back("--chdir=" + spec.working_dir);
  a.insert(a.end(), so.sbatch_args.begin(), so.sbatch_args.end());
  std::string cmd = "--wrap=exec";
  auto word = [&cmd](const std::string& w) { cmd.append(1, ' ').append(w); };
  if (!spec.env.empty() || !spec.inherit_env) {
    word("env");
    if (!spec.inherit_env) word("-i");
    for (const auto& [k, v] : spec.env) word(shell_quote(k + "=" + v));
  }
  word(shell_quote(program));
  for (std::size_t i = 1; i < spec.argv.size(); ++i) word(shell_quote(spec.argv[i]));
  a.push_back(std::move(cmd));
  return a;
}

std::map<long, squeue_job> parse_squeue(const std::string& text) {
  std::map<long, squeue_job> m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto bar = line.find('|');
    if (bar == std::string::npos || bar == 0) continue;
    char* end = nullptr;
    long id = std::strtol(line.c_str(), &end, 10);
    if (end != line.c_str() + bar || id <= 0) continue;
    auto rest = line.substr(bar + 1), nodes = std::string(), reason = std::string();
    if (auto second = rest.find('|'); second != std::string::npos) {
      nodes = rest.substr(second + 1);
      rest.resize(second);
      if (auto third = nodes.find('|'); third != std::string::npos) {  // the reason may hold ',' but no '|'
        reason = nodes.substr(third + 1);
        nodes.resize(third);
      }
    }
    m[id] = {std::move(rest), std::move(nodes), std::move(reason)};
  }
  return m;
}

std::string scontrol_field(const std::string& text, const std::string& key) {
  auto at = text.find(" " + key + "=");
  if (at == std::string::npos) {
    if (text.rfind(key + "=", 0) != 0) return {};
    at = 0;
  } else {
    at += 1;
  }
  at += key.size() + 1;
  auto end = text.find_first_of(" \n", at);
  return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

namespace {
// Slurm's ExitCode "code:signal"; code -1 when it has none.
void read_exit_code(const std::string& code, exit_status& s) {
  auto colon = code.find(':');
  if (colon == std::string::npos) {
    s.code = -1;
    return;
  }
  s.code = std::atoi(code.c_str());
  s.signal = std::atoi(code.c_str() + colon + 1);
}
}  // namespace

std::optional<exit_status> parse_scontrol_job(const std::string& text) {
  std::string state = scontrol_field(text, "JobState"), code = scontrol_field(text, "ExitCode");
  if (state.empty()) return std::nullopt;
  exit_status s;
  // A preempted job whose process ends on the preemption's SIGTERM is FAILED or COMPLETED to
  // Slurm; its PreemptTime says what really happened.
  std::string preempt = scontrol_field(text, "PreemptTime");
  s.state = !preempt.empty() && preempt != "None" && preempt != "Unknown" ? "PREEMPTED" : state;
  read_exit_code(code, s);
  if (auto reason = scontrol_field(text, "Reason"); reason != "None") s.trace.reason = reason;
  s.trace.host = scontrol_field(text, "BatchHost");
  return s;
}

std::optional<exit_status> parse_sacct_job(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  std::vector<std::string> f;
  for (std::size_t at = 0;;) {
    auto bar = line.find('|', at);
    f.push_back(line.substr(at, bar == std::string::npos ? std::string::npos : bar - at));
    if (bar == std::string::npos) break;
    at = bar + 1;
  }
  if (f.size() < 4 || f[0].empty()) return std::nullopt;
  exit_status s;
  s.state = f[0].substr(0, f[0].find(' '));  // "CANCELLED by 0"
  read_exit_code(f[1], s);
  if (f[2] != "None") s.trace.reason = f[2];
  if (f[3] != "None assigned") s.trace.host = f[3];
  return s;
}

bool terminal_state(const std::string& s) {
  static const char* const states[] = {"COMPLETED", "FAILED",  "CANCELLED",     "PREEMPTED",
                                       "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL",
                                       "DEADLINE",  "REVOKED", "SPECIAL_EXIT"};
  for (const char* t : states)
    if (s.rfind(t, 0) == 0) return true;  // "CANCELLED by 0" carries a suffix
  return false;
}

}  // namespace troupe::cluster::slurm
