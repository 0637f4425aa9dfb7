// Helpers for strategies that keep a full model replica on every worker (allreduce, local SGD):
// packing parameters, gradients and optimizer state into one flat buffer for a collective.
#pragma once

#include <span>
#include <vector>

#include "troupe/actors/strategy.hpp"

namespace troupe::actors::replicas {

// Every parameter value, then (with_optimizer) each trainable parameter's optimizer slots and step.
std::size_t state_size(worker_context& ctx, bool with_optimizer);
void pack_state(worker_context& ctx, bool with_optimizer, std::span<float> out);
void unpack_state(worker_context& ctx, bool with_optimizer, std::span<const float> in);

// The most trained replica's parameters (and optimizer state) to every replica: after a ring is
// (re)built (the name is historical: the source is no longer always rank 0).
expected<void> sync_from_rank0(worker_context& ctx, bool with_optimizer, std::vector<float>& buf);
// Sizes the optimizer slots (with_optimizer) ahead, and `buf` for sync_from_rank0.
void reserve_state(worker_context& ctx, bool with_optimizer, std::vector<float>& buf);

// After a failed collective: forgets the ring (the next ensure() builds the new one) and returns a
// dropped `retry`. `what` names what was lost in the log ("allreduce: step").
step_result drop_round(worker_context& ctx, const error& e, const char* what);

}  // namespace troupe::actors::replicas
