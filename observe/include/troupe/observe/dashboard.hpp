// `troupe dashboard`: a web page over every job under a jobs root, running and finished, built
// from what each job directory keeps (events.jsonl, nodes.json, logs/, result.json). The page and
// its chart library (uPlot, vendored under observe/third_party) are embedded in the binary; the
// page polls the JSON API below once a second.
//
// API (all GET unless said; job ids and node names are checked against their grammars, so no
// path can leave the root: anything else is 400, an unknown job 404, an unknown path 404, a known
// one with another method 405 with Allow):
//   /api/jobs                           {"root", "jobs": [{id, state, strategy, workers_alive,
//                                        workers_wanted, tasks_done, tasks_total, started_ms, duration_s,
//                                        error (a file of the job that could not be read), reason}]};
//                                        an ended job's tasks are its result.json's
//   /api/jobs/<id>/events?after=OFFSET  {"events": [...], "next_offset", "skipped", "more" (true: at most
//                                        4 MiB of lines per answer, ask again from next_offset)}
//   /api/jobs/<id>/nodes                nodes.json as written by the runner
//   /api/jobs/<id>/log/<node>?bytes=N   {"text": the last N bytes (<= 1 MiB) of logs/<node>.log}
//   /api/jobs/<id>/result               {"result": result.json or null}
//   /api/servers                        the model servers under the root (`troupe serve`,
//   <root>/serve/<name>/
//                                        server.json): {"servers": [{name, state (serve status's: "serving",
//                                        "draining", "starting", "stopped", "failed", "dead"), version,
//                                        job_id, replicas_ready, replicas_wanted, url, requests_per_s,
//                                        rows_per_s, p50_ms, p99_ms, restarts, swap, started_ms, updated_ms,
//                                        error}]}
//   /api/cluster                        the Slurm allocations of the jobs under the root: {"slurm": true,
//                                        "total_cpus", "now_ms", "jobs": {<id>: [{slurm_id, node, partition,
//                                        cpus, start_ms, end_ms (-1: running), state}]}, "series": {"t_ms",
//                                        "jobs", "cpus": [job][time], "utilisation": [time]},
//                                        "utilisation_avg"}; else
//                                        {"slurm": false, "why"} (502 when a Slurm command failed). Asked
//                                        on a thread of its own at most every 2 s; a request waits at most
//                                        1.5 s for it, then gets the last answer (now_ms: when), or 503
//                                        with Retry-After before the first.
//   POST /api/jobs/<id>/scale?workers=N  through `control`, token required: {"ok": true, "workers": the
//                                        target the runner took, "note": why it is not N (clamped)};
//                                        N digits only (an empty value read as 0 and shrank the job)
//   POST /api/jobs/<id>/stop             through `control`, token required: 202 {"ok": true, "stop":
//                                        "requested"} once the runner has the request; the job ends
//                                        after (its state in /api/jobs)
// Security: with `require_token` (set whenever the server listens beyond loopback) every API request
// (the page and its script, which hold no job data, excepted) needs the cluster token (`Authorization: Bearer
// T` or `?token=T`), else 401. scale/stop always need a token: the cluster token, or that job's own (<job
// dir>/token, its transport token, the one `troupe scale/stop` use); `troupe dashboard` sends them through
// control/client.hpp. A control request waits for the runner's answer (at most seconds; other
// requests are served meanwhile on the other threads).
// Untrusted input: a job directory is written by whoever runs the job. Every file is read through
// job_files.hpp (a regular file with one link, reached without following any link, at most 4 MiB of
// JSON nested at most 64 deep); a file that is missing is 404, one that is refused 422 naming it and
// why, and in /api/jobs the job's "error". Nothing a job writes can crash, hang or fail the server
// or another job's answers.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/observe/http_server.hpp"

namespace troupe::observe {

// Runs a Slurm command (`sinfo`, `sacct`; SLURM_TIME_FORMAT=%s set) with a time and output bound: its
// stdout, or an error naming why (not installed, timed out, non-zero exit with its stderr).
using slurm_command = std::function<expected<std::string>(const std::vector<std::string>& argv)>;

// What the runner answered a scale: the target it took and, when that is not what was asked, why
// ("clamped to [1, 8]"). A stop answers workers -1.
struct control_answer {
  int workers = -1;
  std::string note;
};

struct dashboard_options {
  std::string root;  // the jobs root: one directory per job
  std::string token;
  bool require_token = false;
  // scale (workers >= 0) or stop (workers < 0) a running job, `who` asking ("the dashboard, for
  // <client address>": the job's record names it); unset: those requests get 501.
  std::function<expected<control_answer>(const std::string& job_dir, int workers, const std::string& who)>
      control;
  slurm_command slurm;  // unset: /api/cluster answers {"slurm": false}
};

// The handler is thread-safe: `troupe dashboard` serves it on this many server threads, so a slow
// request (a scale or stop waits for the job's runner to answer, the Slurm commands for slurmctld)
// holds up only its own connection.
http_handler make_dashboard(dashboard_options options);
inline constexpr std::size_t dashboard_threads = 4;

// The embedded files (generated from observe/assets and observe/third_party at build time).
struct embedded_file {
  const char* path;
  const char* content_type;
  const char* data;
  std::size_t size;
};
const embedded_file* find_embedded(const std::string& path);

}  // namespace troupe::observe
