// The build without CUDA: communicators report not_built.
#include "troupe/gpu/nccl_comm.hpp"

namespace troupe::gpu {

namespace {
error not_built(const char* what) {
  return error(gpu_errc::not_built, what);
}
}  // namespace

expected<nccl_unique_id> nccl_unique_id::create() {
  return not_built("ncclGetUniqueId");
}
expected<nccl_comm> nccl_comm::init(const nccl_unique_id&, int, int, const nccl_options&) {
  return not_built("ncclCommInitRankConfig");
}
nccl_comm& nccl_comm::operator=(nccl_comm&& o) noexcept {
  comm_ = std::exchange(o.comm_, nullptr);
  return *this;
}
nccl_comm::~nccl_comm() = default;
void nccl_comm::abort() noexcept {
  comm_ = nullptr;
  broken_ = true;
}
expected<void> nccl_comm::destroy() {
  comm_ = nullptr;
  return {};
}
expected<void> nccl_comm::allreduce_sum(float*, std::size_t, cuda_stream, float) {
  return not_built("ncclAllReduce");
}
expected<void> nccl_comm::broadcast(float*, std::size_t, int, cuda_stream) {
  return not_built("ncclBroadcast");
}
expected<device_memory> memory_info() {
  return not_built("cudaMemGetInfo");
}

}  // namespace troupe::gpu
