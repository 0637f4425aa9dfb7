// The minibatches of the tasks a worker holds: their order, the one it trains now, and the one
// after it.
#include <algorithm>
#include <numeric>
#include <span>

#include "troupe/core/splitmix.hpp"
#include "worker_state.hpp"

namespace troupe::actors {

namespace {
// The rows of the batch at `from`. A batch the strategy chose (`fold`: [train] batch = "auto" or
// "global", whose size the job file cannot check) takes a last row left after it too: a module that
// cannot train on one row (batch norm) failed on it, and the job with it.
std::size_t rows_at(const held_task& t, std::size_t from, std::size_t batch_size, bool fold) {
  const std::size_t left = t.order.size() - std::min(from, t.order.size());
  const std::size_t n = std::min(batch_size, left);
  return fold && n > 1 && left - n == 1 ? n + 1 : n;
}

std::optional<nn::batch> batch_at(const held_task& t, std::size_t from, std::size_t batch_size, bool fold) {
  if (from >= t.order.size()) return std::nullopt;
  const std::size_t n = rows_at(t, from, batch_size, fold);
  return nn::batch(t.rows, std::span<const std::uint32_t>(t.order.data() + from, n));
}

bool strategy_batch(const worker_state& st) {
  return st.ctx && st.ctx->local_batch > 0;
}
}  // namespace

// Fisher-Yates on splitmix64, spelled out: std::shuffle's permutation is the standard library's own
// (libstdc++ and libc++ differ, a release may change it), and a task handed back partway is trained
// on by another holder, maybe another build, that must continue the same order.
void shuffle_rows(held_task& h) {
  h.order.resize(h.rows.rows);
  std::iota(h.order.begin(), h.order.end(), 0u);
  std::uint64_t s = h.id * splitmix64_gamma + h.order_attempt;
  for (std::size_t i = h.order.size(); i > 1; --i) std::swap(h.order[i - 1], h.order[splitmix64_next(s) % i]);
}

std::size_t batch_size(const worker_state& st) {
  if (st.ctx && st.ctx->local_batch > 0) return st.ctx->local_batch;
  return st.node->spec().nn.train.batch_size;
}

std::optional<nn::batch> current_batch(worker_state& st) {
  if (!st.task) return std::nullopt;
  if (st.ctx) st.ctx->data_epoch = st.task->epoch;
  return batch_at(*st.task, st.task->cursor, batch_size(st), strategy_batch(st));
}

std::optional<nn::batch> batch_after(worker_state& st) {
  if (!st.task) return std::nullopt;
  const std::size_t bs = batch_size(st);
  const bool fold = strategy_batch(st);
  const held_task& t = *st.task;
  const std::size_t from = t.cursor + rows_at(t, t.cursor, bs, fold);
  if (from < t.order.size()) return batch_at(t, from, bs, fold);
  // The next task's rows: not while its served records are on their way (no order yet).
  if (!st.next || st.next->ticket) return std::nullopt;
  return batch_at(*st.next, st.next->cursor, bs, fold);
}

}  // namespace troupe::actors
