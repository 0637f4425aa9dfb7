// What a node needs and what a machine has. A launcher reserves a node's `resources` against its
// capacity when it starts the node and releases them when the node is reaped; a launch that would
// exceed the capacity is refused with cluster_errc::insufficient_resources naming both.
//
// A zero field means "not counted": a node spec with cpus = 0 can always start (the local default
// job runs more nodes than a 2-core machine has cores, and that is fine for CPU training).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "troupe/core/error.hpp"

namespace troupe::cluster {

struct resources {
  double cpus = 0;                 // cores, fractional allowed (0.5 = half a core)
  std::uint64_t memory_bytes = 0;  // resident memory
  int gpus = 0;                    // whole devices

  // True when every field of *this is <= the same field of `capacity`.
  bool fits_in(const resources& capacity) const noexcept;
  resources& operator+=(const resources& o) noexcept;
  // Field-wise subtraction clamped at zero.
  resources& operator-=(const resources& o) noexcept;
  // "2 cpus, 1.5 GiB memory, 0 gpus"
  std::string to_string() const;
  bool operator==(const resources&) const = default;
};

inline resources operator+(resources a, const resources& b) noexcept {
  return a += b;
}
inline resources operator-(resources a, const resources& b) noexcept {
  return a -= b;
}

// This machine: cpus = the cores this process may run on (sched_getaffinity), memory = MemTotal
// of /proc/meminfo, gpus = /dev/nvidia<N> device files (CUDA is never linked or initialised here,
// so calling this before fork() is safe; a GPU worker confirms with the CUDA runtime itself).
// Errors name /proc/meminfo when it cannot be read or parsed.
expected<resources> local_capacity();

// Parses the text of /proc/meminfo and returns MemTotal in bytes. `source` names the text in errors.
expected<std::uint64_t> parse_meminfo_total(std::string_view text, std::string_view source);

// Counts the entries named nvidia<digits> in `dev_dir` (the GPU character devices). 0 when the
// directory cannot be read.
int count_nvidia_devices(const std::string& dev_dir = "/dev");

}  // namespace troupe::cluster
