#include "record_server.hpp"

#include <spdlog/spdlog.h>
#include <caf/all.hpp>

#include <cstdint>
#include <cstring>

#include <capnp/orphan.h>

#include "caf_types.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::actors {

record_server::store record_server::open_store(const std::string& dir) {
  store s;
  auto r = storage::record_store::open(dir);
  if (!r) {
    s.error = r.err().to_string();
    return s;
  }
  s.manifest = r->info().to_toml();
  s.records.emplace(std::move(*r));
  if (auto pin = s.records->pin())
    s.pin = std::move(*pin);
  else
    spdlog::warn("record server: {}: {}: records are copied", dir, pin.err().to_string());
  return s;
}

record_server::record_server(node_context& node, const data_paths& data, std::size_t max_reply_bytes,
                             std::size_t min_uncopied_bytes)
    : node_(node),
      train_(open_store(data.train_dir)),
      test_(open_store(data.test_dir)),
      max_reply_bytes_(max_reply_bytes),
      min_uncopied_bytes_(min_uncopied_bytes) {
  if (!train_.records) throw std::runtime_error("record server: " + train_.error);
  spdlog::info("record server: serving {} training and {} test records", train_.records->count(),
               test_.records ? test_.records->count() : 0);
}

void record_server::on_message(const message& m) {
  if (m.kind() != schema::Envelope::Body::RECORD_REQUEST) return;
  if (auto s = node_.reply(m, answer(m), "records"); !s)
    spdlog::debug("record server: reply to {}: {}", m.from_node().to_string(), s.err().to_string());
}

// Puts records [first, first + n) of `s` into `rep`: referenced from the map (o holds the pin) or
// copied; returns why not ("" when they are in).
std::string record_server::fill(const store& s, schema::RecordReply::Builder rep, std::uint64_t first,
                                std::uint64_t n, bool uncopied, outbound& o) {
  const std::size_t size = storage::encoded_size(s.records->info().schema);
  capnp::List<capnp::Data>::Builder list = nullptr;
  capnp::Data::Builder bytes;
  if (uncopied) {
    list = rep.initRecordList(static_cast<unsigned>(n));
    o.hold(s.pin);
  } else {
    bytes = rep.initRecords(static_cast<unsigned>(n * size));
  }
  auto orphans = capnp::Orphanage::getForMessageContaining(rep);
  std::string bad;
  auto put = [&](std::uint64_t i, std::string_view v) {
    if (v.size() != size) {
      bad = s.records->dir() + ": record " + std::to_string(i) + " is " + std::to_string(v.size()) +
            " bytes, not " + std::to_string(size);
      return false;
    }
    const auto k = static_cast<unsigned>(i - first);
    capnp::Data::Reader d(reinterpret_cast<const capnp::byte*>(v.data()), v.size());
    if (!uncopied)
      std::memcpy(bytes.begin() + std::size_t{k} * size, v.data(), size);
    else if (reinterpret_cast<std::uintptr_t>(v.data()) % 8 == 0)
      list.adopt(k, orphans.referenceExternalData(d));  // a segment of its own, in the map
    else
      list.set(k, d);  // misaligned: copied
    return true;
  };
  // In the pinned transaction when there is one (its views may go out uncopied).
  auto visited = s.pin ? s.records->scan_raw(*s.pin, first, n, put) : s.records->scan_raw(first, n, put);
  if (!visited && bad.empty()) bad = visited.err().to_string();
  return bad;
}

outbound record_server::answer(const message& request) const {
  auto req = request.body().getRecordRequest();
  const store& s = req.getTest() ? test_ : train_;
  const std::uint64_t first = req.getFirstRecord(), count = req.getRecordCount();
  std::size_t size = s.records ? storage::encoded_size(s.records->info().schema) : 1;
  std::uint64_t n = std::min<std::uint64_t>(count, std::max<std::size_t>(1, max_reply_bytes_ / size));
  const bool uncopied = s.pin && size >= min_uncopied_bytes_ && size % 8 == 0;
  if (uncopied) n = std::min(n, max_uncopied_records);
  outbound o = reply_to(
      request, static_cast<unsigned>((uncopied ? 4 * n : n * size / 8) + s.manifest.size() / 8 + 64));
  auto rep = o.body().initRecordReply();
  rep.setFirstRecord(first);
  if (!s.records) {
    rep.setError(s.error);
    return o;
  }
  rep.setManifest(s.manifest);
  const std::uint64_t have = s.records->count();
  if (first > have || count > have - first) {
    rep.setError(s.records->dir() + ": records [" + std::to_string(first) + ", " + std::to_string(first) +
                 " + " + std::to_string(count) + ") are outside the store of " + std::to_string(have) +
                 " records");
    return o;
  }
  if (auto bad = fill(s, rep, first, n, uncopied, o); !bad.empty()) {
    rep.setError(bad);
    return o;
  }
  rep.setRecordCount(n);
  return o;
}

namespace {

struct record_server_state {
  std::optional<record_server> core;
  static inline const char* name = "records";
};
using record_server_actor = caf::stateful_actor<record_server_state>;

caf::behavior serve_records(record_server_actor* self, node_context* node, data_paths data) {
  self->state.core.emplace(*node, data);
  return {
      [=](const message& m) { wire::guarded("records", [&] { self->state.core->on_message(m); }); },
  };
}

}  // namespace

caf::actor spawn_record_server(caf::actor_system& sys, node_context& node, data_paths data) {
  return sys.spawn<caf::detached>(serve_records, &node, std::move(data));
}

}  // namespace troupe::actors
