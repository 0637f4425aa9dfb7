// A ZIP archive's entries checked against their CRC-32s (a TorchScript model.pt is one): libtorch's
// loader reads the entries without checking them, so a byte flipped in a tensor's data loaded
// silently and a model predicted 1.0 for every row (predict, evaluate, serve).
#pragma once

#include <string>

#include "troupe/core/error.hpp"

namespace troupe::nn {

// Reads `path` through: its central directory (ZIP64 too), then each entry's data, stored or
// deflated, against the CRC-32 and size the directory gives. Errors (core_errc::invalid_argument,
// naming the file and the entry): no ZIP archive, a directory or entry cut short or out of the file,
// a compression method other than stored or deflate, a size or CRC-32 that does not match;
// io_error when the file cannot be read.
expected<void> check_zip_archive(const std::string& path);

}  // namespace troupe::nn
