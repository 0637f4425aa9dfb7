#include "troupe/transport/message.hpp"

#include <cstring>

#include <capnp/serialize.h>
#include <kj/exception.h>

#include "troupe/transport/errc.hpp"

namespace troupe {

struct message::state {
  frame f;
  std::unique_ptr<capnp::FlatArrayMessageReader> reader;
  schema::Envelope::Reader env;
  node_id from;
};

namespace {
const message::state& empty_state() {
  static const message::state s{};
  return s;
}

// Names on the wire are checked like local ones; "" means the transport itself.
bool valid_wire_name(capnp::Text::Reader t) {
  return t.size() == 0 || valid_actor_name(std::string_view(t.cStr(), t.size()));
}
}  // namespace

schema::Envelope::Reader message::envelope() const {
  return state_ ? state_->env : schema::Envelope::Reader();
}
const node_id& message::from_node() const {
  return state_ ? state_->from : empty_state().from;
}
std::string_view message::from() const {
  auto t = envelope().getFrom();
  return {t.cStr(), t.size()};
}
std::string_view message::to() const {
  auto t = envelope().getTo();
  return {t.cStr(), t.size()};
}
std::span<const std::uint64_t> message::words() const {
  if (!state_) return {};
  return {state_->f.words.get(), state_->f.word_count};
}

expected<message> decode_frame(frame&& f, const frame_limits& limits, node_id from) {
  auto st = std::make_shared<message::state>();
  st->f = std::move(f);
  st->from = std::move(from);
  try {
    capnp::ReaderOptions opts;
    opts.traversalLimitInWords = std::max<std::uint64_t>(8192, st->f.word_count * limits.traversal_factor);
    opts.nestingLimit = static_cast<int>(limits.nesting_limit);
    kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(st->f.words.get()),
                                          st->f.word_count);
    st->reader = std::make_unique<capnp::FlatArrayMessageReader>(words, opts);
    if (st->reader->getEnd() != words.end())
      return make_unexpected(transport_errc::malformed_frame, "segment table does not match the frame size");
    st->env = st->reader->getRoot<schema::Envelope>();
    st->env.totalSize();  // walks every pointer: bounds, nesting and traversal checked here
    if (!valid_wire_name(st->env.getTo()) || !valid_wire_name(st->env.getFrom()))
      return make_unexpected(transport_errc::malformed_frame, "invalid actor name in envelope");
    (void)st->env.getBody().which();
  } catch (const kj::Exception& e) {
    return make_unexpected(transport_errc::malformed_frame, e.getDescription().cStr());
  } catch (const std::exception& e) {
    return make_unexpected(transport_errc::malformed_frame, e.what());
  }
  message m;
  m.state_ = std::move(st);
  return m;
}

outbound::outbound() : outbound(1024) {}
outbound::outbound(unsigned first_segment_words)
    : builder_(std::make_unique<capnp::MallocMessageBuilder>(first_segment_words)),
      root_(builder_->initRoot<schema::Envelope>()) {}
outbound::~outbound() = default;

std::size_t outbound::size_bytes() const {
  auto segs = const_cast<capnp::MallocMessageBuilder&>(*builder_).getSegmentsForOutput();
  std::size_t words = (segs.size() + 2) / 2;
  for (auto s : segs) words += s.size();
  return words * 8;
}

std::vector<std::byte> outbound::to_bytes() const {
  auto flat = capnp::messageToFlatArray(const_cast<capnp::MallocMessageBuilder&>(*builder_));
  auto bytes = flat.asBytes();
  std::vector<std::byte> out(bytes.size());
  std::memcpy(out.data(), bytes.begin(), bytes.size());
  return out;
}

outbound reply_to(const message& request, unsigned first_segment_words) {
  outbound o(first_segment_words);
  o.set_correlation_id(request.correlation_id());
  return o;
}

expected<message> loopback_message(const outbound& out, node_id from) {
  auto bytes = out.to_bytes();
  frame f;
  f.word_count = bytes.size() / 8;
  f.words = std::make_unique_for_overwrite<std::uint64_t[]>(f.word_count);
  std::memcpy(f.words.get(), bytes.data(), bytes.size());
  return decode_frame(std::move(f), frame_limits{}, std::move(from));
}

}  // namespace troupe
