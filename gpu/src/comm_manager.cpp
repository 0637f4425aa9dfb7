#include "troupe/gpu/comm_manager.hpp"

namespace troupe::gpu {

expected<nccl_comm*> comm_manager::rebuild(std::uint64_t epoch, const nccl_unique_id& id, int nranks,
                                           int rank) {
  abort();
  ++rebuilds_;
  auto c = nccl_comm::init(id, nranks, rank, opt_);
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
}

}  // namespace troupe::gpu
