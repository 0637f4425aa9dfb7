#include "troupe/cluster/resources.hpp"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "troupe/cluster/errc.hpp"

namespace troupe::cluster {

bool resources::fits_in(const resources& capacity) const noexcept {
  // A tiny epsilon so that 0.1 + 0.2 cpus fit in 0.3.
  return cpus <= capacity.cpus + 1e-9 && memory_bytes <= capacity.memory_bytes && gpus <= capacity.gpus;
}

resources& resources::operator+=(const resources& o) noexcept {
  cpus += o.cpus;
  memory_bytes += o.memory_bytes;
  gpus += o.gpus;
  return *this;
}

resources& resources::operator-=(const resources& o) noexcept {
  cpus = std::max(0.0, cpus - o.cpus);
  memory_bytes = memory_bytes > o.memory_bytes ? memory_bytes - o.memory_bytes : 0;
  gpus = std::max(0, gpus - o.gpus);
  return *this;
}

std::string resources::to_string() const {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%g cpus, %.1f GiB memory, %d gpus", cpus,
                static_cast<double>(memory_bytes) / (1024.0 * 1024.0 * 1024.0), gpus);
  return buf;
}

expected<std::uint64_t> parse_meminfo_total(std::string_view text, std::string_view source) {
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream fields(line.substr(9));
    std::string number, unit;
    fields >> number >> unit;
    std::uint64_t value = 0;
    auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (number.empty() || ec != std::errc() || ptr != number.data() + number.size() ||
        (unit != "kB" && !unit.empty()))
      return make_unexpected(cluster_errc::corrupt_file,
                             std::string(source) + ": cannot parse the MemTotal line '" + line + "'");
    return unit == "kB" ? value * 1024 : value;
  }
  return make_unexpected(cluster_errc::corrupt_file, std::string(source) + ": no MemTotal line");
}

int count_nvidia_devices(const std::string& dev_dir) {
  std::error_code ec;
  int n = 0;
  for (std::filesystem::directory_iterator it(dev_dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
        std::all_of(name.begin() + 6, name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      ++n;
  }
  return n;
}

expected<resources> local_capacity() {
  resources r;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    r.cpus = CPU_COUNT(&set);
  else
    r.cpus = std::max(1u, std::thread::hardware_concurrency());
  const char* path = "/proc/meminfo";
  std::ifstream in(path);
  if (!in) return make_unexpected(cluster_errc::io_error, std::string(path) + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  auto mem = parse_meminfo_total(text.str(), path);
  if (!mem) return mem.err();
  r.memory_bytes = *mem;
  r.gpus = count_nvidia_devices();
  return r;
}

}  // namespace troupe::cluster
