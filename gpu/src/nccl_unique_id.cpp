#include "troupe/gpu/nccl_comm.hpp"

#include <cstring>

namespace troupe::gpu {

expected<nccl_unique_id> nccl_unique_id::from_bytes(std::string_view b) {
  if (b.size() != size)
    return make_unexpected(core_errc::invalid_argument, "nccl unique id of " + std::to_string(b.size()) +
                                                            " bytes (want " + std::to_string(size) + ")");
  nccl_unique_id id;
  std::memcpy(id.bytes.data(), b.data(), size);
  return id;
}

}  // namespace troupe::gpu
