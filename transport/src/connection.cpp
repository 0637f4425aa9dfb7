#include "connection.hpp"
#include "troupe/core/log_limit.hpp"

#include <array>

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

namespace troupe::detail {
namespace {
constexpr std::size_t max_batch_frames = 256;
}  // namespace

// Asio takes an operation's memory from a one-block cache per io thread, or the heap: a wait that
// stays pending for as long as its connection is idle would hold whatever block it got (often a
// ~440-byte write operation's), and each read would put it somewhere else in the heap, among what
// a join storm allocates and frees. The connection's wait for its socket to be readable (80 bytes)
// takes its slot in the connection instead; anything larger, or a second operation, the heap.
template <class T>
struct connection::slot_allocator {
  using value_type = T;
  connection* c;
  explicit slot_allocator(connection* conn) noexcept : c(conn) {}
  template <class U>
  slot_allocator(const slot_allocator<U>& o) noexcept : c(o.c) {}
  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (!c->read_slot_used_ && bytes <= sizeof(c->read_slot_) && alignof(T) <= alignof(std::max_align_t)) {
      c->read_slot_used_ = true;
      return reinterpret_cast<T*>(c->read_slot_);
    }
    return static_cast<T*>(::operator new(bytes));
  }
  void deallocate(T* p, std::size_t) noexcept {
    if (reinterpret_cast<std::byte*>(p) == c->read_slot_)
      c->read_slot_used_ = false;
    else
      ::operator delete(p);
  }
  template <class U>
  bool operator==(const slot_allocator<U>& o) const noexcept {
    return c == o.c;
  }
};

struct connection::on_readable_handler {
  std::shared_ptr<connection> self;
  using allocator_type = slot_allocator<void>;
  allocator_type get_allocator() const noexcept { return allocator_type(self.get()); }
  void operator()(const boost::system::error_code& ec) { self->on_readable(ec); }
};

#if defined(__GLIBCXX__) && defined(__x86_64__)
// A master keeps one connection per member: 368 bytes, read wait included (make_shared's block:
// 384 with its counts). A field that makes it larger should be worth a 4,000-member master's RSS.
static_assert(sizeof(connection) <= 368);
#endif

connection::connection(socket_type socket, std::shared_ptr<const conn_params> params, bool dialled,
                       std::string remote)
    : socket_(std::move(socket)),
      params_(std::move(params)),
      remote_(std::move(remote)),
      reader_(handshake_limits()),
      hs_(std::make_unique<handshake_state>()),
      dialled_(dialled) {}

connection::~connection() {
  // A closed connection whose writes completed holds nothing: it may outlive its endpoint (a
  // fault-injection delay timer holds it), so it touches the endpoint's counters only when it must.
  if (queued_ != 0) params_->stats->queued_bytes -= static_cast<std::int64_t>(queued_);
}

std::size_t connection::queued_bytes() const {
  std::lock_guard lk(mu_);
  return queued_;
}

void connection::start() {
  boost::system::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
  socket_.non_blocking(true, ec);  // on_readable's read_some returns would_block, never waits
  last_rx_ = last_hb_ = params_->clock->now();
  hs_->deadline = last_rx_ + params_->handshake_timeout;
  send_hello();
  do_read();
}

connection::out_frame connection::make_frame(outbound&& m) {
  out_frame f;
  f.holds = std::move(m).release_holds();
  f.builder = std::move(m).release();
  auto segs = f.builder->getSegmentsForOutput();
  f.table.assign(segs.size() + 1 + (segs.size() % 2 == 0 ? 1 : 0), 0);
  f.table[0] = static_cast<std::uint32_t>(segs.size() - 1);
  std::size_t words = 0;
  for (std::size_t i = 0; i < segs.size(); ++i) {
    f.table[i + 1] = static_cast<std::uint32_t>(segs[i].size());
    words += segs[i].size();
  }
  f.bytes = f.table.size() * 4 + words * 8;
  return f;
}

expected<void> connection::enqueue(outbound&& m, std::chrono::milliseconds wait) {
  if (phase_.load() != phase::open) return make_unexpected(transport_errc::not_connected, remote_);
  return push(make_frame(std::move(m)), wait);
}

expected<void> connection::enqueue_raw(std::vector<std::byte> bytes) {
  out_frame f;
  f.bytes = bytes.size();
  f.raw = std::move(bytes);
  return push(std::move(f), {});
}

expected<void> connection::push(out_frame&& f, std::chrono::milliseconds wait) {
  std::unique_lock lk(mu_);
  auto has_room = [&] { return closed_ || queued_ == 0 || queued_ + f.bytes <= params_->queue_bytes; };
  if (!has_room()) {
    bool room = false;
    if (wait.count() > 0 && !on_io_thread()) {
      ++params_->room_waiters;
      auto& clk = *params_->clock;
      room = troupe::wait_until(clk, params_->room, lk, clk.now() + wait, has_room);
      --params_->room_waiters;
    }
    if (!room)
      return make_unexpected(transport_errc::queue_full,
                             "to " + peer_.name + " (" + std::to_string(queued_) + " bytes queued)");
  }
  if (closed_) return make_unexpected(transport_errc::closed, "connection to " + remote_);
  if (!queue_locked(std::move(f))) return {};
  lk.unlock();
  if (on_io_thread()) {
    do_write();
  } else {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->do_write(); });
  }
  return {};
}

bool connection::queue_locked(out_frame&& f) {
  queued_ += f.bytes;
  params_->stats->queued_bytes += static_cast<std::int64_t>(f.bytes);
  queue_.push_back(std::move(f));
  if (write_active_) return false;
  write_active_ = true;
  return true;
}

template <class Fn>
void connection::for_each_buffer(const out_frame& f, Fn&& fn) {
  if (!f.builder) return fn(asio::const_buffer(f.raw.data(), f.raw.size()));
  fn(asio::const_buffer(f.table.data(), f.table.size() * 4));
  for (auto seg : f.builder->getSegmentsForOutput()) fn(asio::const_buffer(seg.begin(), seg.size() * 8));
}

// Writes every queued frame with one gather write: segment tables and builder segments in place.
void connection::do_write() {
  std::vector<out_frame> batch;
  {
    std::lock_guard lk(mu_);
    if (closed_ || queue_.empty()) {
      write_active_ = false;
      return;
    }
    if (queue_.size() <= max_batch_frames) {
      batch.swap(queue_);  // the whole queue is the batch
    } else {
      auto batch_end = queue_.begin() + static_cast<std::ptrdiff_t>(max_batch_frames);
      batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(batch_end));
      queue_.erase(queue_.begin(), batch_end);
    }
  }
  std::vector<asio::const_buffer> bufs;
  bufs.reserve(batch.size() * 3);
  for (auto& f : batch) for_each_buffer(f, [&](asio::const_buffer b) { bufs.push_back(b); });
  // Moving the batch into the handler keeps its frames (and the buffers above) where they are.
  asio::async_write(
      socket_, bufs,
      [self = shared_from_this(), batch = std::move(batch)](
          const boost::system::error_code& ec, std::size_t n) mutable { self->on_written(ec, n, batch); });
}

void connection::on_written(const boost::system::error_code& ec, std::size_t n,
                            std::vector<out_frame>& batch) {
  std::size_t done_bytes = 0;
  for (auto& f : batch) done_bytes += f.bytes;
  params_->stats->bytes_sent += n;
  params_->stats->frames_sent += batch.size();
  params_->stats->queued_bytes -= static_cast<std::int64_t>(done_bytes);
  std::vector<out_frame>().swap(batch);  // the frames go now, before the next write
  {
    std::lock_guard lk(mu_);
    queued_ -= done_bytes;
  }
  notify_room();
  if (ec) {
    if (ec != asio::error::operation_aborted) close("write error: " + ec.message());
    std::lock_guard lk(mu_);
    write_active_ = false;
    return;
  }
  // The peer takes any frame as a sign of life (took()), so a connection that sent something
  // within the heartbeat interval sends no heartbeat: under traffic they all but vanish.
  last_hb_ = params_->clock->now();
  do_write();
}

void connection::notify_room() {
  if (params_->room_waiters.load() > 0) params_->room.notify_all();
}

void connection::do_read() {
  if (auto direct = reader_.direct(); !direct.empty()) {
    auto buf = reader_.prepare();  // the same span, and the reader now expects commit()
    socket_.async_read_some(asio::buffer(buf.data(), buf.size()),
                            [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
                              self->on_read(ec, n);
                            });
    return;
  }
  // The wait fits its slot (else every wait would go to the heap, as before).
  static_assert(sizeof(asio::detail::reactive_wait_op<on_readable_handler, socket_type::executor_type>) <=
                sizeof(read_slot_));
  socket_.async_wait(socket_type::wait_read, on_readable_handler{shared_from_this()});
}

bool connection::read_failed(const boost::system::error_code& ec) {
  if (phase_.load() == phase::closed) return true;
  if (!ec) return false;
  close(ec == asio::error::eof ? "connection closed by peer" : "read error: " + ec.message());
  return true;
}

bool connection::took(std::size_t n, const expected<void>& parsed) {
  last_rx_ = params_->clock->now();
  params_->stats->bytes_received += n;
  if (phase_.load() == phase::closed) return false;
  if (!parsed) {
    ++params_->stats->malformed_frames;
    close("malformed frame: " + parsed.err().context(), transport_errc::malformed_frame);
    return false;
  }
  return true;
}

void connection::on_read(const boost::system::error_code& ec, std::size_t n) {
  if (read_failed(ec)) return;
  if (!took(n, reader_.commit(n, [this](frame&& f) { on_frame(std::move(f)); }))) return;
  do_read();
}

void connection::on_readable(const boost::system::error_code& wait_ec) {
  if (read_failed(wait_ec)) return;
  const auto buf = params_->read_buffer;
  // A full buffer means more may be waiting: read again now, a few times before other sockets' turn.
  for (int round = 0; round < 4; ++round) {
    boost::system::error_code ec;
    std::size_t n = socket_.read_some(asio::buffer(buf.data(), buf.size()), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) break;  // readable was stale
    if (read_failed(ec)) return;
    if (!took(n, reader_.consume({buf.data(), n}, [this](frame&& f) { on_frame(std::move(f)); }))) return;
    if (n < buf.size() || !reader_.direct().empty()) break;
  }
  do_read();
}

void connection::on_frame(frame&& f) {
  const auto ph = phase_.load();
  if (ph == phase::closed) return;
  ++params_->stats->frames_received;
  auto m = decode_frame(std::move(f), ph == phase::open ? params_->limits : handshake_limits(), peer_);
  if (!m) {
    ++params_->stats->malformed_frames;
    close("malformed frame: " + m.err().context(), transport_errc::malformed_frame);
    return;
  }
  if (ph == phase::handshake) {
    on_handshake(*m);
    return;
  }
  if (m->kind() == schema::Envelope::Body::HEARTBEAT) return;
  params_->owner->on_message(shared_from_this(), std::move(*m));
}

void connection::tick(time_point now) {
  const auto ph = phase_.load();
  if (ph == phase::closed) return;
  if (ph == phase::handshake && hs_ && now > hs_->deadline)
    // Silence, not a refusal: a stopped (SIGSTOP) or hung peer (it read "refused: handshake timeout").
    return close("handshake timeout: the peer did not answer in time", transport_errc::handshake_failed);
  if (ph != phase::open) return;
  boost::system::error_code ec;
  // Bytes waiting in the socket mean the peer is alive and this thread was late (a slow handler).
  if (now - last_rx_ > params_->heartbeat_timeout && socket_.available(ec) > 0 && !ec) last_rx_ = now;
  if (now - last_rx_ > params_->heartbeat_timeout) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_rx_).count();
    return close("heartbeat timeout: silent for " + std::to_string(ms) + " ms", transport_errc::timeout);
  }
  if (now - last_hb_ < params_->heartbeat_interval) return;
  last_hb_ = now;
  outbound o(16);
  auto hb = o.body().initHeartbeat();
  hb.setSeq(++hb_seq_);
  hb.setSentNs(std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
  auto f = make_frame(std::move(o));
  if (!write_now(f)) (void)push(std::move(f), {});
}

bool connection::write_now(out_frame& f) {
  std::unique_lock lk(mu_);
  if (closed_ || write_active_ || !queue_.empty()) return false;
  std::array<asio::const_buffer, 4> bufs;  // a heartbeat's table and its one segment
  std::size_t count = 0;
  bool fits = true;
  for_each_buffer(f, [&](asio::const_buffer b) {
    if (count < bufs.size())
      bufs[count++] = b;
    else
      fits = false;
  });
  if (!fits) return false;
  const std::span<const asio::const_buffer> used(bufs.data(), count);
  boost::system::error_code ec;
  std::size_t n = 0;
  if (params_->direct_write_limit >= f.bytes) {
    n = socket_.write_some(used, ec);  // non-blocking (start())
  } else if (params_->direct_write_limit > 0) {
    const std::array<asio::const_buffer, 1> head{asio::buffer(used[0], params_->direct_write_limit)};
    n = socket_.write_some(head, ec);
  }
  if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
    lk.unlock();
    close("write error: " + ec.message());
    return true;
  }
  params_->stats->bytes_sent += n;
  if (n == f.bytes) {
    ++params_->stats->frames_sent;
    return true;
  }
  queue_rest(lk, used, n);
  return true;
}

void connection::queue_rest(std::unique_lock<small_mutex>& lk, std::span<const asio::const_buffer> used,
                            std::size_t n) {
  out_frame rest;
  std::size_t total = 0;
  for (const auto& b : used) total += b.size();
  rest.raw.reserve(total - n);
  std::size_t skip = n;
  for (const auto& b : used) {
    const auto* p = static_cast<const std::byte*>(b.data());
    const std::size_t k = std::min(skip, b.size());
    rest.raw.insert(rest.raw.end(), p + k, p + b.size());
    skip -= k;
  }
  rest.bytes = rest.raw.size();
  (void)queue_locked(std::move(rest));  // starts the write: none was active
  lk.unlock();
  do_write();
}

void connection::close(const std::string& reason, transport_errc code) {
  if (phase_.exchange(phase::closed) == phase::closed) return;
  close_code_ = code;
  {
    std::lock_guard lk(mu_);
    closed_ = true;
    std::size_t dropped = 0;
    for (auto& f : queue_) dropped += f.bytes;
    queue_.clear();
    queued_ -= dropped;
    params_->stats->queued_bytes -= static_cast<std::int64_t>(dropped);
  }
  notify_room();
  boost::system::error_code ec;
  socket_.shutdown(socket_type::shutdown_both, ec);
  socket_.close(ec);
  // A malformed frame's reason quotes the peer's bytes (Cap'n Proto's "expected ... [\xdc == ...]"),
  // which made a node's log binary to grep.
  params_->owner->on_closed(shared_from_this(), printable_text(reason, 300));
}

}  // namespace troupe::detail
