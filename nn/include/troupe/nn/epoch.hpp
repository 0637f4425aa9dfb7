// One pass over a dataset in minibatches: the row order for (seed, epoch), the batching and the
// progress window. nn::trainer::train_epoch and gpu::train_epoch both run it, so a CPU and a GPU
// run of the same config see the same batches in the same order and report alike.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/nn/data/dataset.hpp"
#include "troupe/nn/trainer.hpp"

namespace troupe::nn {

// The row order of epoch `epoch` (0-based) into `order`: 0..rows-1, shuffled by (config.seed,
// epoch) when config.shuffle.
void epoch_order(std::size_t rows, const train_config& config, std::size_t epoch,
                 std::vector<std::uint32_t>& order);

// Calls `step` on each batch of config.batch_size rows (the last one shorter) of `data`, in
// epoch_order (computed into `order`, a buffer kept by the caller); after every config.log_every
// steps calls `report` (when set) with the mean loss and the rows per second since the last report.
// Returns the mean batch loss, or the first error `step` returns (the epoch stops there).
expected<double> run_epoch(const dataset& data, const train_config& config, std::size_t epoch,
                           std::vector<std::uint32_t>& order,
                           const std::function<expected<double>(const batch&)>& step,
                           const std::function<void(const progress&)>& report);

}  // namespace troupe::nn
