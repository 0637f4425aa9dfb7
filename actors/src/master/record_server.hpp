// The record server (issue 19, "data dispensers that serve records"): one per job, on the master
// node (which has the record stores), under the name "records". It answers a RecordRequest with
// the encoded records of the range asked for, at most max_reply_bytes of records per reply (at
// least one record), or with an error naming the bad range. No decoding: the worker verifies each
// record's checksum. Records of min_uncopied_record_bytes or more go out straight from the LMDB
// map (each one a segment of the reply's frame, written by the transport in place; the reply
// holds the server's read transaction until it is written); smaller ones are copied into the
// reply once. Workers on a host without
// the store ([data] serve, docs/data.md) fetch their tasks' records through it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "node_context.hpp"
#include "roles.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::actors {

class record_server {
 public:
  static constexpr std::size_t default_max_reply_bytes = std::size_t{4} << 20;
  // Records of at least this size (and a whole number of words, 8-byte aligned in the map: LMDB
  // keeps them on overflow pages of their own) go out without a copy, each referenced from the
  // map as a segment of the reply; smaller ones are copied into one blob.
  static constexpr std::size_t min_uncopied_record_bytes = 2048;
  // Records per reply sent uncopied: under the transport's segment limit (512 by default).
  static constexpr std::uint64_t max_uncopied_records = 448;

  // Opens data.train_dir (throws std::runtime_error when it cannot: the supervisor restarts the
  // actor) and data.test_dir (when it cannot, test requests are answered with that error).
  // `min_uncopied_bytes`: records of this size or more go out uncopied (SIZE_MAX: none, every
  // record is copied into the reply; for comparisons).
  record_server(node_context& node, const data_paths& data,
                std::size_t max_reply_bytes = default_max_reply_bytes,
                std::size_t min_uncopied_bytes = min_uncopied_record_bytes);

  // A RecordRequest is answered (RecordReply); other kinds are ignored. A malformed message throws
  // kj::Exception (the actor catches it).
  void on_message(const message& m);
  // The RecordReply to `request` (a RecordRequest).
  outbound answer(const message& request) const;

 private:
  struct store {
    std::optional<storage::record_store> records;
    std::shared_ptr<const storage::read_txn> pin;  // held open: records go out of the map uncopied
    std::string manifest;                          // its TOML, sent in every reply
    std::string error;                             // why it could not be opened
  };
  static store open_store(const std::string& dir);
  static std::string fill(const store& s, schema::RecordReply::Builder rep, std::uint64_t first,
                          std::uint64_t n, bool uncopied, outbound& o);

  node_context& node_;
  store train_, test_;
  std::size_t max_reply_bytes_;
  std::size_t min_uncopied_bytes_;
};

}  // namespace troupe::actors
