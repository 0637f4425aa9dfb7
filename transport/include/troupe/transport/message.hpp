// Messages as handlers see them (`message`, received) and as senders build them (`outbound`).
//
// Every frame's root is a schema::Envelope (transport/schema/envelope.capnp): `to`/`from` actor
// names and a `body` union of all message kinds. A `message` owns the frame's aligned words and a
// Cap'n Proto reader over them; it is immutable and cheap to copy (shared), so it can be forwarded
// into an actor mailbox as is and read on another thread (one thread at a time: the reader's
// traversal budget is a plain counter). It was validated on arrival
// (segment table, sizes, every pointer in bounds, traversal and nesting limits), but a getter of
// a field of the wrong kind can still throw kj::Exception: a handler invoked by the endpoint has
// that caught for it (the connection is closed as malformed); code reading it elsewhere must
// catch it itself.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include <capnp/message.h>

#include "troupe/core/error.hpp"
#include "troupe/core/ids.hpp"
#include "troupe/transport/config.hpp"
#include "troupe/transport/frame.hpp"
#include "troupe/transport/schema/envelope.capnp.h"

namespace troupe {

class message {
 public:
  struct state;
  message() = default;

  schema::Envelope::Reader envelope() const;
  schema::Envelope::Body::Reader body() const { return envelope().getBody(); }
  schema::Envelope::Body::Which kind() const { return body().which(); }
  // Sending node (name and incarnation, from its handshake) and actor name ("" = its transport).
  const node_id& from_node() const;
  std::string_view from() const;
  std::string_view to() const;
  // The envelope's correlationId: the id a request carries and its reply echoes; 0 for a message
  // that is neither.
  std::uint64_t correlation_id() const { return envelope().getCorrelationId(); }
  // The frame as received (segment table + segments), e.g. to forward it unchanged.
  std::span<const std::uint64_t> words() const;
  std::size_t size_bytes() const { return words().size() * 8; }
  explicit operator bool() const { return static_cast<bool>(state_); }

 private:
  friend expected<message> decode_frame(frame&& f, const frame_limits& limits, node_id from);
  std::shared_ptr<const state> state_;
};

// Validates a frame and wraps it: Cap'n Proto segment table, root Envelope, a full traversal of
// the message under the traversal and nesting limits, and valid `to`/`from` names. Never throws;
// the error (malformed_frame) carries the decoder's reason.
expected<message> decode_frame(frame&& f, const frame_limits& limits, node_id from);

// A message being built. Owns a MallocMessageBuilder whose root is an Envelope; the endpoint sends
// its segments without copying them. Move-only.
class outbound {
 public:
  // A first segment for a control message of a few fields (a lease, a report, its acknowledgement):
  // 256 bytes instead of the default 8 KB, which Cap'n Proto zeroes (calloc) for every message.
  // A message that outgrows it gets a second segment.
  static constexpr unsigned small_words = 32;

  outbound();
  // First segment sized for `first_segment_words` (a hint for large messages).
  explicit outbound(unsigned first_segment_words);
  outbound(outbound&&) noexcept = default;
  outbound& operator=(outbound&&) noexcept = default;
  ~outbound();

  schema::Envelope::Builder envelope() { return root_; }
  schema::Envelope::Body::Builder body() { return root_.getBody(); }
  capnp::MessageBuilder& builder() { return *builder_; }
  std::uint64_t correlation_id() { return root_.getCorrelationId(); }
  void set_correlation_id(std::uint64_t id) { root_.setCorrelationId(id); }
  // Bytes on the wire (segment table included).
  std::size_t size_bytes() const;
  // The frame as contiguous bytes (copies; for tests and the fuzz corpus).
  std::vector<std::byte> to_bytes() const;
  // Keeps `h` alive as long as the message (until the transport has written it): what external
  // data adopted into it (capnp::Orphanage::referenceExternalData) points into.
  void hold(std::shared_ptr<const void> h) { holds_.push_back(std::move(h)); }
  // Hands the builder to the transport (which writes its segments in place); leaves this empty.
  std::unique_ptr<capnp::MallocMessageBuilder> release() && { return std::move(builder_); }
  // What hold() was given; the transport keeps it until the builder is gone.
  std::vector<std::shared_ptr<const void>> release_holds() && { return std::move(holds_); }

 private:
  std::vector<std::shared_ptr<const void>> holds_;  // before builder_: destroyed after it
  std::unique_ptr<capnp::MallocMessageBuilder> builder_;
  schema::Envelope::Builder root_{nullptr};
};

// The answer to `request`: an empty outbound (fill its body) that carries the request's correlation
// id. Send it back to the requester, node request.from_node().name, actor request.from() (rpc.hpp's
// send_reply does): the requester pairs it with its request by that id.
outbound reply_to(const message& request, unsigned first_segment_words = 1024);

// Turns an outbound into a received-style message (a copy), for delivery to a local name.
expected<message> loopback_message(const outbound& out, node_id from);

}  // namespace troupe
