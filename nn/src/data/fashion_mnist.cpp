// IDX format (big-endian): u32 magic (0x0803 images, 0x0801 labels), u32 count, then for images
// u32 rows, u32 cols; then count records of unsigned bytes.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <vector>

#include "gz_file.hpp"
#include "troupe/nn/data/readers.hpp"
#include "troupe/nn/errc.hpp"

namespace troupe::nn {
namespace {

constexpr std::uint32_t images_magic = 0x00000803;
constexpr std::uint32_t labels_magic = 0x00000801;

std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

std::string idx_path(const std::string& dir, const std::string& split, const char* kind) {
  std::string base = dir + "/" + split + "-" + kind;
  if (std::filesystem::exists(base + ".gz")) return base + ".gz";
  if (std::filesystem::exists(base)) return base;
  return base + ".gz";
}

struct idx_data {
  std::vector<std::uint32_t> dims;
  std::vector<unsigned char> bytes;
};

// An IDX file's header (the magic, then one u32 per dimension), checked against `magic`.
expected<std::vector<unsigned char>> read_idx_header(detail::gz_file& f, const std::string& path,
                                                     std::uint32_t magic) {
  if (!f.is_open())
    return make_unexpected(nn_errc::io_error, path + ": cannot open: " + std::strerror(errno));
  std::vector<unsigned char> head(4 + 4 * (magic & 0xff));
  if (f.read(head.data(), head.size()) != static_cast<long>(head.size()))
    return make_unexpected(nn_errc::bad_data,
                           path + ": truncated header (" + std::to_string(head.size()) + " bytes expected)");
  if (be32(head.data()) != magic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "wrong magic 0x%08x, expected 0x%08x", be32(head.data()), magic);
    return make_unexpected(nn_errc::bad_data, path + ": " + buf);
  }
  return head;
}

// Reads an IDX file with the given magic; `record` names one record in error messages.
expected<idx_data> read_idx(const std::string& path, std::uint32_t magic, const char* record,
                            std::size_t max_rows) {
  detail::gz_file f(path);
  auto header = read_idx_header(f, path, magic);
  if (!header) return header.err();
  const auto& head = *header;
  const std::size_t ndims = magic & 0xff;
  idx_data out;
  std::size_t record_size = 1;
  for (std::size_t i = 0; i < ndims; ++i) {
    out.dims.push_back(be32(head.data() + 4 + 4 * i));
    if (i > 0) record_size *= out.dims.back();
  }
  const std::size_t in_file = out.dims[0];
  std::size_t count = in_file;
  if (max_rows > 0) count = std::min(count, max_rows);
  out.dims[0] = static_cast<std::uint32_t>(count);
  out.bytes.resize(count * record_size);
  long got = f.read(out.bytes.data(), out.bytes.size());
  if (got < 0) return make_unexpected(nn_errc::bad_data, path + ": " + f.error_text());
  if (static_cast<std::size_t>(got) != out.bytes.size())
    return make_unexpected(nn_errc::bad_data,
                           path + ": truncated at " + record + " " +
                               std::to_string(static_cast<std::size_t>(got) / record_size) + " of " +
                               std::to_string(count));
  // The whole file read: its end must be a clean one (a gzip trailer when it is gzip).
  unsigned char past = 0;
  if (count == in_file && f.read(&past, 1) == 0)
    if (auto problem = f.end_problem(); !problem.empty())
      return make_unexpected(nn_errc::bad_data, path + ": " + problem);
  return out;
}

expected<void> check_split(const std::string& split) {
  if (split == "train" || split == "t10k") return {};
  return make_unexpected(nn_errc::bad_config,
                         "fashion-mnist split '" + split + "': expected 'train' or 't10k'");
}

}  // namespace

expected<std::size_t> fashion_mnist_rows(const std::string& dir, const std::string& split,
                                         std::size_t max_rows) {
  if (auto s = check_split(split); !s) return s.err();
  const std::string path = idx_path(dir, split, "labels-idx1-ubyte");
  detail::gz_file f(path);
  auto head = read_idx_header(f, path, labels_magic);
  if (!head) return head.err();
  const std::size_t in_file = be32(head->data() + 4);
  return max_rows > 0 ? std::min(in_file, max_rows) : in_file;
}

expected<dataset> read_fashion_mnist(const std::string& dir, const std::string& split, std::size_t max_rows) {
  if (auto s = check_split(split); !s) return s.err();
  const std::string img_path = idx_path(dir, split, "images-idx3-ubyte");
  const std::string lbl_path = idx_path(dir, split, "labels-idx1-ubyte");
  auto images = read_idx(img_path, images_magic, "image", max_rows);
  if (!images) return images.err();
  auto labels = read_idx(lbl_path, labels_magic, "label", max_rows);
  if (!labels) return labels.err();
  if (images->dims[0] != labels->dims[0])
    return make_unexpected(nn_errc::bad_data, lbl_path + ": " + std::to_string(labels->dims[0]) +
                                                  " labels but " + img_path + " has " +
                                                  std::to_string(images->dims[0]) + " images");
  dataset d;
  d.rows = images->dims[0];
  const std::size_t h = images->dims[1], w = images->dims[2];
  d.info = {"fashion-mnist/" + split, h * w, 0, 10, {1, h, w}, 0};
  d.dense.resize(d.rows * h * w);
  std::transform(images->bytes.begin(), images->bytes.end(), d.dense.begin(),
                 [](unsigned char b) { return static_cast<float>(b) * (1.0f / 255.0f); });
  d.labels.resize(d.rows);
  for (std::size_t i = 0; i < d.rows; ++i) {
    if (labels->bytes[i] > 9)
      return make_unexpected(nn_errc::bad_data, lbl_path + ": label " + std::to_string(i) + " is " +
                                                    std::to_string(labels->bytes[i]) + ", expected 0..9");
    d.labels[i] = labels->bytes[i];
  }
  return d;
}

}  // namespace troupe::nn
