#include "eval_round.hpp"

#include <algorithm>
#include <cmath>

#include "troupe/nn/metrics.hpp"

namespace troupe::actors {

void eval_round::start(const std::vector<std::string>& workers, bool spread) {
  const std::size_t n = spread ? std::clamp<std::size_t>(workers.size(), 1, max_parts_) : 1;
  parts_.assign(n, part{});
}

std::vector<eval_request> eval_round::due(const std::vector<std::string>& workers,
                                          troupe::clock::time_point now) {
  std::vector<eval_request> out;
  if (workers.empty()) return out;
  // In the caller's order: the first of the least loaded is asked.
  std::vector<std::pair<std::string, std::size_t>> load;
  for (const auto& w : workers) load.emplace_back(w, 0);
  for (const auto& p : parts_) {
    auto it = std::find_if(load.begin(), load.end(), [&](const auto& l) { return l.first == p.worker; });
    if (!p.answer && it != load.end()) ++it->second;
  }
  for (std::uint32_t i = 0; i < parts_.size(); ++i) {
    auto& p = parts_[i];
    if (p.answer || (!p.worker.empty() && now - p.sent < (p.disk_fault ? retry_ : timeout_))) continue;
    // Among the least loaded, one other than the worker it timed out on (which would take it only after
    // the ask it is still on). A disk fault's part goes back to the worker that answered it as any part.
    const std::string passed_over = p.disk_fault ? std::string() : p.worker;
    auto least = std::min_element(load.begin(), load.end(), [&](auto& a, auto& b) {
      return std::pair(a.second, a.first == passed_over) < std::pair(b.second, b.first == passed_over);
    });
    if (p.id != 0 && !p.worker.empty()) p.earlier.emplace_back(p.id, p.worker);  // timed out
    p.worker = least->first;
    ++least->second;
    p.id = ++next_id_;
    p.sent = now;
    p.disk_fault = false;
    out.push_back({p.worker, p.id, i, static_cast<std::uint32_t>(parts_.size()), i == 0});
  }
  return out;
}

void eval_round::gone(const std::string& worker) {
  for (auto& p : parts_)
    if (!p.answer && p.worker == worker) p.worker.clear();
}

std::optional<std::string> eval_round::answer(std::uint64_t id, const std::string& worker, eval_answer a) {
  auto it = std::find_if(parts_.begin(), parts_.end(), [&](const part& p) {
    return !p.answer && id != 0 &&
           (p.id == id ||
            std::find(p.earlier.begin(), p.earlier.end(), std::pair(id, worker)) != p.earlier.end());
  });
  if (it == parts_.end()) return std::nullopt;
  const bool current = it->id == id;
  if (!a.error.empty() && a.disk_fault) {
    if (current) it->disk_fault = true;  // asked again after retry_ (or of another, if it leaves)
    return a.error;
  }
  if (!a.error.empty()) {
    ++failures_;
    last_error_ = worker + ": " + a.error;
    if (current) it->worker.clear();  // asked again, of any worker
    return a.error;
  }
  it->answer = std::move(a);
  it->answered_by = worker;
  return std::nullopt;
}

std::optional<eval_metrics> eval_round::result() const {
  if (parts_.empty() || std::any_of(parts_.begin(), parts_.end(), [](const part& p) { return !p.answer; }))
    return std::nullopt;
  eval_metrics m;
  double loss = 0, right = 0;
  std::vector<float> scores, labels;
  for (const auto& p : parts_) {
    m.rows += p.answer->rows;
    loss += p.answer->loss * static_cast<double>(p.answer->rows);
    right += p.answer->accuracy * static_cast<double>(p.answer->rows);
    scores.insert(scores.end(), p.answer->scores.begin(), p.answer->scores.end());
    labels.insert(labels.end(), p.answer->labels.begin(), p.answer->labels.end());
    m.by.push_back(p.answered_by);
  }
  if (m.rows > 0) {
    m.loss = loss / static_cast<double>(m.rows);
    m.accuracy = right / static_cast<double>(m.rows);
  }
  if (!scores.empty() && scores.size() == labels.size())
    if (const double a = nn::auc(scores, labels); std::isfinite(a)) m.auc = a;  // none with one class only
  return m;
}

std::string eval_round::evaluating() const {
  std::string out;
  for (const auto& p : parts_)
    if (!p.answer && !p.worker.empty() && out.find(p.worker) == std::string::npos)
      out += (out.empty() ? "" : ", ") + p.worker;
  return out;
}

}  // namespace troupe::actors
