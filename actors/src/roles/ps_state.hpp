// A PS shard's state: the parameters it owns (views into a model built like the workers' one),
// their optimizer slots, rows changed since the last checkpoint, and its checkpoint store.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>

#include "../node_context.hpp"
#include "roles.hpp"
#include "troupe/nn/model.hpp"
#include "troupe/nn/optimizer.hpp"
#include "troupe/nn/row_store.hpp"
#include "troupe/observe/timeline.hpp"
#include "troupe/storage/checkpoint_store.hpp"

namespace troupe::actors {

struct owned_dense {
  nn::dense_param* param = nullptr;
  nn::dense_slots slots;
};

struct owned_table {
  owned_table(nn::embedding_table* t, const nn::optimizer& opt) : table(t), slots(t->dim(), opt) {}
  nn::embedding_table* table;
  nn::row_slots slots;
  nn::slot_set dirty;  // rows updated since the last checkpoint, by their slot number in `slots`
};

struct ps_state {
  node_context* rt = nullptr;  // the node this shard runs on
  std::uint32_t index = 0, shards = 1;
  std::unique_ptr<nn::model> model;
  std::unique_ptr<nn::optimizer> opt;
  std::map<std::string, owned_dense> dense;
  std::map<std::string, owned_table> tables;
  std::optional<storage::checkpoint_store> store;
  std::uint64_t version = 0;     // pushes applied by this incarnation
  std::uint32_t since_full = 0;  // checkpoints since the last full one
  bool has_checkpoint = false;
  std::uint64_t applied_at_checkpoint = 0;
  std::uint64_t checkpoints_written = 0;
  std::string fault;  // the disk fault of the last checkpoint write (reported to the master); empty: none
  std::shared_ptr<observe::job_timeline> timeline;  // full checkpoints go on the job's timeline
  static inline const char* name = "ps";
};

// Builds the model, takes the shard's share, restores the latest checkpoint. Throws on failure.
void init_shard(ps_state& st, node_context* rt, const data_paths& data);
// Writes a checkpoint if anything changed since the last one (full every Nth). Logs failures; a disk
// fault is reported to the master (which pauses the job) until a write succeeds again.
void checkpoint(ps_state& st);

}  // namespace troupe::actors
