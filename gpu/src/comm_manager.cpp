#include "troupe/gpu/comm_manager.hpp"

#include <system_error>
#include <utility>

namespace troupe::gpu {

comm_manager::comm_manager(comm_manager&& o) noexcept : opt_(o.opt_) {
  *this = std::move(o);
}

comm_manager& comm_manager::operator=(comm_manager&& o) noexcept {
  if (this == &o) return *this;
  abort();
  o.join_reaper();
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
  join_reaper();
}

void comm_manager::retire(std::unique_ptr<nccl_comm> old) {
  join_reaper();  // at most one abort under way
  if (!old) return;
  auto job = [c = std::move(old)] {
    if (c) c->abort();
  };
  try {
    reaper_ = std::thread(std::move(job));
  } catch (const std::system_error&) {
    job();  // no thread to be had: abort here (a no-op if the failed thread took the communicator,
            // whose destructor then released it)
  }
}

void comm_manager::join_reaper() noexcept {
  if (reaper_.joinable()) reaper_.join();
}

}  // namespace troupe::gpu
