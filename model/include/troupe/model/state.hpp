// A trained replica's state on disk: what a ring job's checkpoints hold, what the evaluating worker
// writes at a job's end (`checkpoints/final/`), and what `troupe export`, `troupe run --resume` and
// `[model] init` read back (docs/model_format.md, "State").
//
// A state directory is a storage::checkpoint_store (named dense tensors: the trainable parameters
// by their layout names and the buffers by theirs; optimizer slots keyed by the tensor they belong
// to, each with its step count in two trailing floats, as the PS shards keep theirs; embedding
// rows by table) plus `state.json`, the meta of its latest version, written (atomically) after the
// version is committed. A reader takes the store's latest complete version and the meta: a
// state.json older than the latest version (a crash between the two) still names its version, so
// the meta of a version is never taken for another's.
//
// Thread-safety: one writer per directory; readers anywhere. Errors name the directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "troupe/core/error.hpp"
#include "troupe/storage/checkpoint_store.hpp"

namespace troupe::model {

// An optimizer slot vector is stored with its step count appended as two floats (the u64's bytes),
// as the PS shards store theirs.
void append_step(std::vector<float>& slots, std::uint64_t step);
std::uint64_t read_step(const float* two_floats);
// The dense slot entry a ring checkpoint keeps its meta's step under as well (two floats, as
// append_step writes them; a name no tensor has): a version whose state.json is lost, or an older
// version kept beside the latest, still says its step.
inline constexpr const char* step_key = "#step";
// Likewise the meta's data_epoch (two floats, as append_step writes them), where the writer knew it.
inline constexpr const char* epoch_key = "#data_epoch";

struct state_meta {
  std::uint64_t version = 0;  // the checkpoint store's version this meta describes
  std::uint64_t step = 0;     // optimizer steps the replica had taken (async_ps: the shards' pushes applied)
  std::optional<std::uint32_t> data_epoch;  // the pass over the data it was in (0-based); none: not known
  std::string from;                         // "final" (the job's end) or "checkpoint"
  std::string writer;                       // the node that wrote it ("worker-0#1"), or "train --local"
  std::int64_t written_unix_ms = 0;
  // Read back: state.json described this version (else only `version` and `from` are set).
  bool described = false;
};

// Appends step_key and (where `m` knows it) epoch_key to `s`: a ring checkpoint's version says its
// step and epoch without its state.json (read_state and read_state_or_older read them back into the
// meta of a version state.json does not describe).
void keep_meta_in(storage::flat_state& s, const state_meta& m);

struct loaded_state {
  storage::shard_state state;
  state_meta meta;
  std::string dir;  // where it was read (for messages)
};

// A state directory kept open for writing (a ring job's checkpoint writer writes many versions).
// write() adds `s` as a new full version of the store (its data file fdatasynced, the version
// committed), then state.json with `meta` (its version filled in) and keeps the newest two versions.
// state.json is advisory: renamed into place but not fsynced (a crash may leave the previous one,
// which names its own version: read_state then gives the newer version with only its number).
// Errors: the store's (disk faults named), io_error for state.json. One writer per directory.
class state_writer {
 public:
  static expected<state_writer> open(const std::string& dir);
  expected<std::uint64_t> write(const storage::flat_state& s, state_meta meta);
  expected<std::uint64_t> write(const storage::shard_state& s, state_meta meta);
  const std::string& dir() const { return dir_; }

 private:
  state_writer(std::string dir, storage::checkpoint_store store)
      : dir_(std::move(dir)), store_(std::move(store)) {}
  expected<std::uint64_t> finish(expected<std::uint64_t> v, state_meta meta);
  std::string dir_;
  storage::checkpoint_store store_;
};

// One version written by a writer of its own (state_writer::open then write).
expected<std::uint64_t> write_state(const std::string& dir, const storage::flat_state& s, state_meta meta);
expected<std::uint64_t> write_state(const std::string& dir, const storage::shard_state& s, state_meta meta);

// The optimizer steps a replica restored from `s` takes up: the most of its optimizer slot vectors'
// step counts (a node's own entries, "#..." keys, left out); 0 with none. What its writer's meta
// called its step, whether or not that state.json survived.
std::uint64_t optimizer_steps(const storage::shard_state& s);

// The replica steps a ring checkpoint holds (what a ring restored from it starts again from, and
// the tasks of a later step were lost with the replicas): its meta's step, the writer's strategy's
// count (the GPU path's host trainer takes no steps, so its slots say none; local_sgd's counts its
// averaging rounds), or where the meta is lost (a state.json naming another version) the step the
// state keeps under step_key, else (a state written before 2026-12-07) the optimizer slots' own.
std::uint64_t held_steps(const loaded_state& s);

// The latest version in `dir` with its meta; nullopt when `dir` holds none. A state.json that does
// not name the latest version gives a meta with only `version` (and `from` "checkpoint") set.
expected<std::optional<loaded_state>> read_state(const std::string& dir);
// read_state, or where the latest version cannot be read (a corrupt or missing data file), the newest
// older complete version the store keeps that loads (warned; its meta has only `version` and `from`:
// state.json describes the latest, and held_steps reads its step_key): what a ring restores from
// and `--resume` counts from. The latest's error when none loads.
expected<std::optional<loaded_state>> read_state_or_older(const std::string& dir);

// Where a job keeps its states: <job dir>/checkpoints/{final,ring}/ and the PS shards' stores,
// <ps_checkpoints>/ps-<i>/ (job::ps_options::checkpoints_of: <job dir>/checkpoints, or
// <checkpoint_dir>/<job id>), with an async_ps worker's buffers in <job dir>/checkpoints/buffers/.
struct state_places {
  std::string final_dir, ring_dir, buffers_dir;
  std::vector<std::string> ps_dirs;
};
state_places places_of(const std::string& job_dir, const std::string& ps_checkpoints,
                       std::uint32_t ps_shards);

// The job's model state for export and warm start: final/ when the job wrote one (the state its
// own evaluation scored), else the ring's latest checkpoint (either: read_state_or_older, an older
// version where the latest cannot be read); the PS shards' latest checkpoints are
// merged in (their dense tensors where the worker's state lacks them, and every embedding row), and
// with the shards alone, the latest buffers an async_ps worker wrote.
// not_found (naming the places looked at) when none holds a state.
expected<loaded_state> job_state(const state_places& places);

// The state `[model] init` names (docs/model_format.md, "Continue training"): a model directory's
// state/ (written by `troupe export` beside model.pt), or a job directory's job_state. Errors name
// the path: neither a model directory (model.json) nor a job directory (job.toml), or no state.
expected<loaded_state> init_state(const std::string& source);

}  // namespace troupe::model
