#include "troupe/model/predictions.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "troupe/nn/metrics.hpp"

namespace troupe::model {

namespace {

constexpr char magic[8] = {'T', 'R', 'P', 'R', 'E', 'D', '0', '1'};
constexpr std::size_t header_bytes = 8 + 8 * 3 + 4 * 2 + 8;

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <class T>
T get(const char*& at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  at += sizeof v;
  return v;
}

unexpected io(const std::string& path, const std::string& why) {
  return make_unexpected(core_errc::io_error, path + ": " + why);
}

}  // namespace

std::string part_path(const std::string& dir, std::uint64_t task) {
  return dir + "/part-" + std::to_string(task) + ".bin";
}

expected<void> write_part(const std::string& dir, const prediction_part& p) {
  std::string bytes(magic, sizeof magic);
  put(bytes, p.task);
  put(bytes, p.first);
  put(bytes, p.rows);
  put(bytes, p.width);
  put(bytes, std::uint32_t{0});
  put(bytes, p.loss_sum);
  for (std::uint64_t r = 0; r < p.rows; ++r) {
    put(bytes, p.labels[r]);
    bytes.append(reinterpret_cast<const char*>(p.values.data() + r * p.width), p.width * sizeof(float));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = part_path(dir, p.task), tmp = path + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io(tmp, std::strerror(errno));
  std::size_t done = 0;
  while (done < bytes.size()) {
    auto n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return io(tmp, std::strerror(e));
    }
    done += static_cast<std::size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return io(path, std::strerror(e));
  }
  return {};
}

expected<prediction_part> read_part(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return io(path, "cannot be read");
  if (bytes.size() < header_bytes || std::memcmp(bytes.data(), magic, sizeof magic) != 0)
    return io(path, "not a prediction part (bad header)");
  const char* at = bytes.data() + sizeof magic;
  prediction_part p;
  p.task = get<std::uint64_t>(at);
  p.first = get<std::uint64_t>(at);
  p.rows = get<std::uint64_t>(at);
  p.width = get<std::uint32_t>(at);
  (void)get<std::uint32_t>(at);
  p.loss_sum = get<double>(at);
  if (p.width == 0 || bytes.size() != header_bytes + p.rows * (1 + p.width) * sizeof(float))
    return io(path, "truncated or of the wrong size for " + std::to_string(p.rows) + " rows");
  p.labels.resize(p.rows);
  p.values.resize(p.rows * p.width);
  for (std::uint64_t r = 0; r < p.rows; ++r) {
    p.labels[r] = get<float>(at);
    std::memcpy(p.values.data() + r * p.width, at, p.width * sizeof(float));
    at += p.width * sizeof(float);
  }
  return p;
}

namespace {
// The first record a part holds, from its header alone.
expected<std::uint64_t> part_first(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char h[header_bytes];
  if (!in.read(h, sizeof h) || std::memcmp(h, magic, sizeof magic) != 0)
    return io(path, "not a prediction part (bad header)");
  const char* at = h + sizeof magic + 8;
  return get<std::uint64_t>(at);
}
}  // namespace

expected<std::uint64_t> visit_parts(const std::string& dir,
                                    const std::function<expected<void>(const prediction_part&)>& visit) {
  std::map<std::uint64_t, std::string> by_first;  // first record -> file
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const auto name = e.path().filename().string();
    if (name.rfind("part-", 0) != 0 || e.path().extension() != ".bin") continue;
    auto first = part_first(e.path().string());
    if (!first) return first.err();
    by_first[*first] = e.path().string();
  }
  if (ec) return io(dir, ec.message());
  std::uint64_t next = 0;
  for (const auto& [first, path] : by_first) {
    if (first != next)
      return io(dir, "records " + std::to_string(std::min(first, next)) + ".." +
                         std::to_string(std::max(first, next)) +
                         (first > next ? " have no part" : " are in two parts"));
    auto p = read_part(path);
    if (!p) return p.err();
    if (auto v = visit(*p); !v) return v.err();
    next = first + p->rows;
  }
  return next;
}

expected<prediction_metrics> score_parts(const std::string& dir) {
  std::vector<float> scores, labels;
  double loss_sum = 0;
  std::size_t width = 1;
  std::uint64_t unscored = 0, first_unscored = 0;
  auto n = visit_parts(dir, [&](const prediction_part& p) -> expected<void> {
    width = p.width;
    for (std::uint64_t r = 0; r < p.rows; ++r)
      if (!nn::scored(p.values.data() + r * p.width, p.width) && unscored++ == 0)
        first_unscored = p.first + r;
    scores.insert(scores.end(), p.values.begin(), p.values.end());
    labels.insert(labels.end(), p.labels.begin(), p.labels.end());
    loss_sum += p.loss_sum;
    return {};
  });
  if (!n) return n.err();
  auto m = nn::score_predictions(scores, width, labels, loss_sum);
  return prediction_metrics{m.rows,     m.loss,
                            m.accuracy, width == 1 ? m.auc : std::numeric_limits<double>::quiet_NaN(),
                            unscored,   first_unscored};
}

}  // namespace troupe::model
