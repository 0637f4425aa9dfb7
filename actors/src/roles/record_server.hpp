// The record server (issue 19, "data dispensers that serve records"): one per job, on the master
// node (which has the record stores), under the name "records". It answers a RecordRequest with
// the encoded records of the range asked for, copied once from the LMDB map into the reply (no
// decoding: the worker verifies each record's checksum), at most max_reply_bytes of records per
// reply (at least one record), or with an error naming the bad range. Workers on a host without
// the store ([data] serve, docs/data.md) fetch their tasks' records through it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "../node_context.hpp"
#include "roles.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::actors {

class record_server {
 public:
  static constexpr std::size_t default_max_reply_bytes = std::size_t{4} << 20;

  // Opens data.train_dir (throws std::runtime_error when it cannot: the supervisor restarts the
  // actor) and data.test_dir (when it cannot, test requests are answered with that error).
  record_server(node_context& node, const data_paths& data,
                std::size_t max_reply_bytes = default_max_reply_bytes);

  // A RecordRequest is answered (RecordReply); other kinds are ignored. A malformed message throws
  // kj::Exception (the actor catches it).
  void on_message(const message& m);
  // The RecordReply to `request` (a RecordRequest).
  outbound answer(const message& request) const;

 private:
  struct store {
    std::optional<storage::record_store> records;
    std::string manifest;  // its TOML, sent in every reply
    std::string error;     // why it could not be opened
  };
  static store open_store(const std::string& dir);

  node_context& node_;
  store train_, test_;
  std::size_t max_reply_bytes_;
};

}  // namespace troupe::actors
