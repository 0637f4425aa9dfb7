// Reading a job's TOML: a job file as the commands that take one read it, and the job a job
// directory holds (its job.toml as its runner resolved it) for the processes that run beside the
// runner (nodes, `troupe chaos`).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "troupe/core/config.hpp"
#include "troupe/job/job_spec.hpp"

namespace troupe::job {

// The job file at `path` (`troupe run`, `troupe train --local`, `troupe config check`, `troupe
// chaos`): every relative path the file writes (model.path and init, data.train/test/dir/spill_dir,
// job.root and dataset_cache, ps.checkpoint_dir, transport.token_file, log.file) is taken relative
// to the job file's directory, however the file is named ("job.toml", "./job.toml", "a/job.toml"),
// and written back absolute, so the document means the same from any working directory, in the job
// directory's copy and on every node. A path given by --set afterwards is the caller's (relative to
// its working directory). Errors: config_doc::from_file's.
expected<config_doc> read_job_file(const std::string& path);
// The same with --set `overrides` ("key=value") applied, a relative path among them made absolute
// against the working directory (a relative `--set ps.checkpoint_dir=ckpts` was refused as "not an
// absolute path" while a relative `--set job.root=...` was taken). Errors: read_job_file's, and
// config_doc::apply_override's naming the flag.
expected<config_doc> read_job_file(const std::string& path, const std::vector<std::string>& overrides);

// Every relative path of `doc` (the keys read_job_file resolves) made absolute against the working
// directory: what `troupe config check --print` shows, so that the file it prints means the same
// from anywhere (defaults such as job.root = "jobs" are relative to where the command ran).
expected<void> absolute_paths(config_doc& doc);

// A TOML file of settings other than a job's (`troupe serve --config`) read as read_job_file reads
// a job file: the relative paths under `keys` (table, key) taken relative to the file's directory.
expected<config_doc> read_settings_file(const std::string& path,
                                        const std::vector<std::pair<std::string, std::string>>& keys);

// Errors: the job directory's (not a job directory, job.toml unreadable) or job_spec::read's.
expected<job_spec> load_job_spec(const std::string& job_dir);

}  // namespace troupe::job
