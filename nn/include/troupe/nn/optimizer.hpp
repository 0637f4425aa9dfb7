// Optimizers as stateless update kernels plus explicit state ("slots"), so that the same code
// updates a worker's dense parameters and a parameter-server shard's embedding rows, and the
// state can be checkpointed and restored by whoever owns it.
//
// Slot layout: an optimizer keeps slots_per_element() floats per parameter element, slot-major:
// for n elements, slot s of element i is slots[s*n + i]. Plus one step counter per updated
// unit (a dense parameter, or one embedding row: Adam's bias correction is per row, "lazy Adam").
//   sgd      momentum == 0: no slots; momentum > 0: slot 0 = velocity
//   adagrad  slot 0 = accumulated squared gradients (starts at initial_accumulator)
//   adam     slot 0 = m (first moment), slot 1 = v (second moment)
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/nn/embedding_table.hpp"
#include "troupe/nn/row_store.hpp"
#include "troupe/nn/tensor.hpp"

namespace troupe::nn {

struct optimizer_config {
  std::string type = "sgd";  // sgd | adagrad | adam
  double learning_rate = 0.01;
  double momentum = 0.0;              // sgd
  bool nesterov = false;              // sgd with momentum
  double initial_accumulator = 0.1;   // adagrad
  double beta1 = 0.9, beta2 = 0.999;  // adam
  double epsilon = 1e-7;              // adagrad, adam
  double weight_decay = 0.0;          // L2 added to the gradient (dense and touched rows)
};

class optimizer {
 public:
  virtual ~optimizer() = default;
  virtual const char* name() const = 0;
  virtual std::size_t slots_per_element() const = 0;
  // The value every slot starts with.
  virtual float slot_init() const { return 0.0f; }
  // One step on n elements: value -= f(grad, slots, step). `step` counts this unit's previous
  // updates and is incremented. `slots` holds slots_per_element()*n floats (slot-major).
  virtual void update(float* value, const float* grad, float* slots, std::size_t n,
                      std::uint64_t& step) const = 0;

  double learning_rate() const { return lr_; }
  void set_learning_rate(double lr) { lr_ = lr; }

 protected:
  double lr_ = 0.01;
};

// Builds sgd/adagrad/adam; a bad type or hyper-parameter is a bad_config error naming it.
expected<std::unique_ptr<optimizer>> make_optimizer(const optimizer_config& config);

// State of one dense parameter.
struct dense_slots {
  std::vector<float> values;  // slots_per_element * n
  std::uint64_t step = 0;
};

// Updates value with grad (same size); creates the slots on first use.
void apply_dense(const optimizer& opt, tensor& value, const tensor& grad, dense_slots& slots);

// Per-row optimizer state of one embedding table: id -> (slots_per_element*dim floats, step).
class row_slots {
 public:
  row_slots(std::size_t dim, const optimizer& opt);
  std::size_t width() const { return rows_.width(); }  // floats per row
  std::size_t size() const { return rows_.size(); }
  std::uint64_t id(std::uint32_t slot) const { return rows_.id(slot); }  // of a slot apply_sparse gave
  // The slots of `id`, created with slot_init on first use; `step` points at its counter and
  // `slot` (if given) receives their slot number.
  float* get(std::uint64_t id, std::uint64_t** step, std::uint32_t* slot = nullptr);
  void prefetch(std::uint64_t id) const { rows_.prefetch(id); }  // of get(id)'s index entry
  // Checkpoint access: false if `id` has no state yet.
  bool read(std::uint64_t id, float* out, std::uint64_t& step) const;
  void write(std::uint64_t id, const float* in, std::uint64_t step);
  template <class F>
  void for_each(F&& f) const {  // f(id, const float* slots, step)
    rows_.for_each([&](std::uint64_t id, std::uint32_t i) { f(id, rows_.row(i), *this->step(i)); });
  }

 private:
  std::uint64_t* step(std::uint32_t i) const {
    return steps_[i >> row_store::kSlabShift] + (i & (row_store::kSlabRows - 1));
  }
  row_store rows_;  // slots_per_element*dim floats a row, created with slot_init
  // The step counters by slot, in slabs as the rows: a counter never moves either.
  std::vector<std::uint64_t*> steps_;
  slab_arena steps_arena_;
};

// Applies a sparse gradient to the rows of `table` (created lazily if absent) and their slots.
void apply_sparse(const optimizer& opt, embedding_table& table, const sparse_grad& grad, row_slots& slots);
// The same from raw lists: rows[i*dim, (i+1)*dim) is the gradient of ids[i]. If `updated` is
// given, the slot numbers (in `slots`, see row_slots::id) of the updated rows are added to it.
void apply_sparse(const optimizer& opt, embedding_table& table, std::span<const std::uint64_t> ids,
                  const float* rows, row_slots& slots, slot_set* updated = nullptr);

}  // namespace troupe::nn
