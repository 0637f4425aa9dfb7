#include <string>

#include "troupe/gpu/cuda.hpp"

namespace troupe::gpu {

expected<std::string> describe_all() {
  auto n = device_count();
  if (!n) return std::move(n).err();
  std::string out;
  for (int i = 0; i < *n; ++i) {
    auto d = describe(i);
    if (!d) return std::move(d).err();
    out += std::to_string(i) + ": " + d->name + " (" + std::to_string(d->total_memory >> 20) + " MiB, sm_" +
           std::to_string(d->compute_major * 10 + d->compute_minor) + ", " + d->pci_bus_id + ", " + d->uuid +
           ")\n";
  }
  return out;
}

}  // namespace troupe::gpu
