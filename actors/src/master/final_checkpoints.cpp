#include "final_checkpoints.hpp"

#include <algorithm>

namespace troupe::actors {

final_checkpoints::final_checkpoints(std::uint32_t shards, std::uint32_t max_failures,
                                     troupe::clock::duration timeout, troupe::clock::duration retry)
    : max_failures_(std::max<std::uint32_t>(1, max_failures)), timeout_(timeout), retry_(retry) {
  for (std::uint32_t i = 0; i < shards; ++i) shards_.push_back({"ps-" + std::to_string(i)});
}

std::vector<std::string> final_checkpoints::due(const std::set<std::string>& alive,
                                                troupe::clock::time_point now) {
  std::vector<std::string> out;
  for (auto& s : shards_) {
    if (s.written || !alive.count(s.name)) continue;
    if (s.asked && now - s.sent < (s.erred ? retry_ : timeout_)) continue;
    s.asked = true;
    s.erred = false;
    s.sent = now;
    out.push_back(s.name);
  }
  return out;
}

void final_checkpoints::answer(const std::string& shard, const std::string& error, bool disk_fault) {
  auto it = std::find_if(shards_.begin(), shards_.end(), [&](const auto& s) { return s.name == shard; });
  if (it == shards_.end() || it->written) return;
  if (error.empty()) {
    it->written = true;
    return;
  }
  it->erred = true;
  last_error_ = error;
  if (!disk_fault) ++failures_;
}

bool final_checkpoints::done() const {
  return std::all_of(shards_.begin(), shards_.end(), [](const auto& s) { return s.written; });
}

std::string final_checkpoints::waiting() const {
  std::string out;
  for (const auto& s : shards_)
    if (!s.written) out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

}  // namespace troupe::actors
