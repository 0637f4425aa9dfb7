// `troupe status` of a job whose runner is gone (finished, stopped, crashed): its status as far
// as its directory tells, from the timeline (events.jsonl), result.json and nodes.json.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "troupe/cluster/job_dir.hpp"
#include "troupe/core/error.hpp"

namespace troupe::control {

// The same JSON object as a live status (client.hpp), with "state" (the job_end event's, else
// "dead" after 15 s without a new event, else "unreachable"), "source": "events.jsonl" and "recent" (the
// last membership, re-queue and checkpoint events). Errors: `unreachable` (why the runner could not be asked)
// when the directory holds no events either.
expected<std::string> status_from_timeline(const std::string& job_dir, const error& unreachable);

// The nodes of nodes.json as status "members" (state with how an exited node ended).
// `runner_gone`: a node recorded running whose process is gone shows as "gone (runner died)".
nlohmann::json members_json(const cluster::nodes_file& nodes, bool runner_gone);
// Each member of a live status gets where its incarnation runs, from nodes.json: `host` (a
// [cluster] hosts entry; Slurm: the node squeue listed it on) and `slurm_job` (status listed
// neither: on hosts its pid is another machine's). A node launched but not yet in the master's view
// is added with the state "launched, not joined".
void add_placement(nlohmann::json& status, const cluster::job_dir& dir);
// Adds "recent" (the timeline's last notable events), "source" and "skipped_lines" to `status`;
// nothing when the job has no events.
void add_recent_events(nlohmann::json& status, const std::string& job_dir);
// The training loss of the newest metrics event that has one (the last 64 KiB of the timeline are
// read); NaN when there is none. For a job whose runner died (no result.json to take it from).
double last_logged_loss(const std::string& job_dir);

}  // namespace troupe::control
