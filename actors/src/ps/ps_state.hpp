// A PS shard's state: the parameters it owns (views into a replica built like the workers' one),
// their optimizer slots, rows changed since the last checkpoint, and its checkpoint store.
#pragma once

#include <caf/atom.hpp>

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "node_context.hpp"
#include "ps_snapshot.hpp"
#include "push_noise.hpp"
#include "roles.hpp"
#include "troupe/actors/ps_checkpoint_log.hpp"
#include "troupe/actors/trainer_backend.hpp"
#include "troupe/nn/optimizer.hpp"
#include "troupe/nn/row_store.hpp"
#include "troupe/observe/timeline.hpp"
#include "troupe/storage/checkpoint_store.hpp"

namespace troupe::actors {

// The shard to itself: copy the next slice of the snapshot; the checkpoint's write returned.
using ckpt_copy_atom = caf::atom_constant<caf::atom("ckpt_copy")>;
using ckpt_done_atom = caf::atom_constant<caf::atom("ckpt_done")>;

// The longest the shard's actor copies its snapshot before it serves the requests that arrived
// meanwhile (a pull or push waits at most about this long for a checkpoint).
inline constexpr std::chrono::microseconds checkpoint_slice{200};

struct ps_state {
  node_context* node = nullptr;  // the node this shard runs on
  std::uint32_t index = 0, shards = 1;
  std::unique_ptr<trainer_backend> model;  // the workers' replica: names, shapes, initial values
  std::unique_ptr<nn::optimizer> opt;
  std::map<std::string, owned_dense> dense;
  std::map<std::string, owned_table> tables;
  // The data's id space (fields x buckets_per_field; 0: unbounded): an id past it comes from no
  // record, and a pull of one would create a row (a peer pulling random ids grew a shard by 93 B each).
  std::uint64_t id_limit = 0;
  // Shared with the thread that writes a checkpoint (one write at a time).
  std::shared_ptr<storage::checkpoint_store> store;
  std::optional<push_noise> noise;  // [train] noise_scale: the estimate from the pushes (push_noise.hpp)
  std::uint64_t version = 0;        // pushes applied by this incarnation
  std::uint32_t since_full = 0;     // checkpoints since the last full one
  bool has_checkpoint = false;
  std::uint64_t checkpoint_version = 0;  // the latest written or restored
  bool next_full = false;  // a write failed: the rows it took out of the dirty sets need a full one
  std::uint64_t applied_at_checkpoint = 0;
  std::uint64_t checkpoints_written = 0;
  std::string fault;  // the disk fault of the last checkpoint write (reported to the master); empty: none
  std::shared_ptr<observe::job_timeline> timeline;  // full checkpoints go on the job's timeline
  // The checkpoint in progress: its snapshot while the actor copies it, then its write.
  std::optional<ps_snapshot> snapshot;
  struct written {
    expected<std::uint64_t> version;
    snapshot_buffers buffers;  // recycled on the write's thread: the next snapshot's
  };
  std::future<written> writing;
  snapshot_buffers spare;  // the last snapshot's buffers, recycled (ps_snapshot.hpp)
  std::uint64_t version_at_snapshot = 0;
  ps_checkpoint_record record;
  static inline const char* name = "ps";
};

// Builds the model, takes the shard's share, restores the latest checkpoint. Throws on failure.
void init_shard(ps_state& st, node_context* node, const data_paths& data);

// A checkpoint in three steps, none of which holds the actor for longer than a slice:
// begin_checkpoint starts a snapshot if anything changed since the last checkpoint and none is in
// progress (full every Nth, or after a failed write); copy_checkpoint_slice copies for about
// `budget` and, once the copy is complete, starts its write on a thread of its own, which calls
// `written` when it returned; finish_checkpoint (then) takes the write's result: logs failures, and
// reports a disk fault to the master (which pauses the job) until a write succeeds again.
bool begin_checkpoint(ps_state& st);
bool copy_checkpoint_slice(ps_state& st, std::chrono::nanoseconds budget, std::function<void()> written);
void finish_checkpoint(ps_state& st);
// All of it now, waiting for the writes (the shard is stopping): the checkpoint in progress, then
// one of what changed since it began.
void checkpoint_now(ps_state& st);
// The master's FinalCheckpoint (every task is over): checkpoint_now, then whether every push this
// shard applied is in a checkpoint (its version), or why not.
struct final_checkpoint_result {
  std::uint64_t version = 0;
  std::string error;        // empty: written
  bool disk_fault = false;  // the error is a disk fault (reported to the master as well)
};
final_checkpoint_result final_checkpoint(ps_state& st);

}  // namespace troupe::actors
