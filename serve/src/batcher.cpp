#include "batcher.hpp"

#include <algorithm>

namespace troupe::serve {

bool batcher::admit(request_ptr r) {
  if (rows_ + r->rows > limits_.max_queue_rows) return false;
  rows_ += r->rows;
  queue_.push_back(std::move(r));
  return true;
}

void batcher::requeue_front(std::vector<request_ptr> rs) {
  for (auto it = rs.rbegin(); it != rs.rend(); ++it) {
    rows_ += (*it)->rows;
    queue_.push_front(std::move(*it));
  }
}

bool batcher::due(clock::time_point now) const {
  if (queue_.empty()) return false;
  if (rows_ >= limits_.max_batch) return true;
  return now >= queue_.front()->arrived + limits_.max_delay;
}

std::optional<clock::time_point> batcher::next_due(clock::time_point now) const {
  if (queue_.empty() || due(now)) return std::nullopt;
  return queue_.front()->arrived + limits_.max_delay;
}

std::vector<request_ptr> batcher::take() {
  std::vector<request_ptr> out;
  std::size_t rows = 0;
  while (!queue_.empty() && (out.empty() || (rows + queue_.front()->rows <= limits_.max_batch &&
                                             !queue_.front()->alone && !out.front()->alone))) {
    rows += queue_.front()->rows;
    out.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  rows_ -= rows;
  return out;
}

std::vector<request_ptr> batcher::expire(clock::time_point now) {
  std::vector<request_ptr> out;
  auto keep = std::stable_partition(queue_.begin(), queue_.end(),
                                    [now](const request_ptr& r) { return r->deadline > now; });
  for (auto it = keep; it != queue_.end(); ++it) {
    rows_ -= (*it)->rows;
    out.push_back(std::move(*it));
  }
  queue_.erase(keep, queue_.end());
  return out;
}

std::vector<request_ptr> batcher::drain() {
  std::vector<request_ptr> out(std::make_move_iterator(queue_.begin()),
                               std::make_move_iterator(queue_.end()));
  queue_.clear();
  rows_ = 0;
  return out;
}

}  // namespace troupe::serve
