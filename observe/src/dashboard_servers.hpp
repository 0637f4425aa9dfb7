// /api/servers: the model servers running under the jobs root (`troupe serve`, docs/serving.md).
// Each keeps <root>/serve/<name>/server.json, rewritten every second; it is read like every other
// file of the root (job_files.hpp: untrusted, no link followed, size and depth capped). Its state is
// `troupe serve status`'s: "serving", "draining" or "starting" while it holds its server.lock (or,
// where this host cannot see the lock, its file was written in the last 15 s), "stopped" or "failed"
// as it said on its way out, else "dead" (killed, or its host lost).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "job_files.hpp"

namespace troupe::observe {

// {"servers": [{name, state, model, version, job_id, replicas_ready, replicas_wanted, url,
// requests_per_s, rows_per_s, p50_ms, p99_ms, restarts, swap, started_ms, updated_ms, error}]}:
// newest first; a server whose file cannot be read lists with `error`. A root without serve/ (or
// whose serve/ is a job's directory) has none.
nlohmann::json servers_json(const jobs_root& root, std::int64_t now_ms);

}  // namespace troupe::observe
