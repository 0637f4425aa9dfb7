#include "troupe/gpu/comm_manager.hpp"

#include <algorithm>
#include <system_error>
#include <utility>

namespace troupe::gpu {

comm_manager::comm_manager(comm_manager&& o) noexcept : opt_(o.opt_) {
  *this = std::move(o);
}

comm_manager& comm_manager::operator=(comm_manager&& o) noexcept {
  if (this == &o) return *this;
  abort();
  o.settle();
  opt_ = o.opt_;
  comm_ = std::move(o.comm_);
  epoch_ = std::exchange(o.epoch_, 0);
  rebuilds_ = o.rebuilds_;
  return *this;
}

comm_manager::~comm_manager() {
  abort();
}

expected<nccl_comm*> comm_manager::rebuild(std::uint64_t epoch, const nccl_unique_id& id, int nranks,
                                           int rank) {
  ++rebuilds_;
  auto c = nccl_comm::init(id, nranks, rank, opt_);
  retire(std::move(comm_));
  epoch_ = 0;
  if (!c) return std::move(c).err().wrap("communicator of ring epoch " + std::to_string(epoch));
  comm_ = std::make_unique<nccl_comm>(std::move(*c));
  epoch_ = epoch;
  return comm_.get();
}

nccl_comm* comm_manager::current(std::uint64_t epoch) noexcept {
  if (!comm_ || epoch != epoch_ || !comm_->healthy()) return nullptr;
  return comm_.get();
}

void comm_manager::abort() noexcept {
  if (comm_) comm_->abort();
  comm_.reset();
  epoch_ = 0;
  settle();
}

void comm_manager::settle() noexcept {
  join_reapers(0);
}

std::size_t comm_manager::aborts_under_way() const noexcept {
  std::size_t n = 0;
  for (const auto& r : reapers_) n += r.done->load(std::memory_order_acquire) ? 0 : 1;
  return n;
}

void comm_manager::retire(std::unique_ptr<nccl_comm> old) {
  // Room for one more abort under way (at least the one this retires).
  join_reapers(static_cast<std::size_t>(std::max(opt_.aborts_in_flight, 1)) - 1);
  if (!old) return;
  auto done = std::make_shared<std::atomic<bool>>(false);
  auto job = [c = std::move(old), done] {
    if (c) c->abort();
    done->store(true, std::memory_order_release);
  };
  try {
    reapers_.push_back({std::thread(std::move(job)), done});
  } catch (const std::system_error&) {
    job();  // no thread to be had: abort here (a no-op if the failed thread took the communicator,
            // whose destructor then released it)
  }
}

void comm_manager::join_reapers(std::size_t keep) noexcept {
  for (auto it = reapers_.begin(); it != reapers_.end();) {
    if (it->done->load(std::memory_order_acquire)) {
      it->thread.join();
      it = reapers_.erase(it);
    } else {
      ++it;
    }
  }
  while (reapers_.size() > keep) {
    reapers_.front().thread.join();
    reapers_.pop_front();
  }
}

}  // namespace troupe::gpu
