// A standby node: a process started like a worker (`troupe node ... --standby`) that loads what
// is slow and the same for every worker of its job (the TorchScript plugin and module), then waits
// for the identity of the node it is to become. The local launcher (local/launcher.hpp,
// keep_standby) hands it one when it launches a node, and adopts the process as that node; the
// node then runs exactly as one launched afresh. docs/models.md says when the runner keeps one.
//
// The identity travels on the standby's stdin (a socket the launcher holds), written once and
// closed: the strings below, each ended by a NUL byte, in this order:
//   "troupe-standby-1", log_file, <n>, n x "NAME=VALUE", <m>, m x argv
// (n and m in decimal). argv is the node's whole command line, argv[0] included.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "troupe/core/error.hpp"

namespace troupe::cluster {

struct standby_identity {
  // Where the node's stdout and stderr go from now on (appended); empty: keep the standby's.
  std::string log_file;
  std::vector<std::pair<std::string, std::string>> env;  // set in the process, replacing
  std::vector<std::string> argv;                         // must not be empty
  bool operator==(const standby_identity&) const = default;
};

std::string encode_standby_identity(const standby_identity& id);
// Errors: invalid_spec naming what is malformed (a wrong header, a missing field, a bad count).
expected<standby_identity> decode_standby_identity(const std::string& bytes);
// Reads `fd` to its end (EINTR retried) and decodes. Errors: io_error (the read failed, or the
// stream ended empty: the launcher went away), or decode's.
expected<standby_identity> read_standby_identity(int fd);

}  // namespace troupe::cluster
