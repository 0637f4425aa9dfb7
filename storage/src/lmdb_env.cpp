#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include "lmdb_writer.hpp"
#include "troupe/storage/disk_fault.hpp"
#include "troupe/storage/lmdb.hpp"

namespace troupe::storage {

namespace fs = std::filesystem;

// Readers count themselves in; a resize waits (bounded) until none is in, and holds new ones off.
struct lmdb_env::gate {
  std::mutex mu;
  std::condition_variable cv;
  int readers = 0;
  bool resizing = false;
  std::atomic<std::uint64_t> maps{0};  // mdb_env_set_mapsize calls that succeeded
};

struct lmdb_env::dbi_cache {
  std::mutex mu;
  std::map<std::string, dbi> handles;
};

namespace {
std::mutex registry_mu;
std::map<std::string, std::weak_ptr<lmdb_env>>& registry() {
  static std::map<std::string, std::weak_ptr<lmdb_env>> r;
  return r;
}
constexpr auto resize_wait = std::chrono::seconds(30);

// LMDB sizes its lock file with ftruncate and writes its header through a shared mapping: on a full
// filesystem (a tmpfs above all) the first write to a page with no block behind it is a SIGBUS, not
// an error (a store or checkpoint opened on a full disk killed the process). The lock file's blocks
// are allocated first (posix_fallocate: never shrinks, never overwrites); no space is then
// ENOSPC, named. 64 KiB holds the reader table LMDB's default 126 readers need (about 8 KiB).
std::optional<error> reserve_lock_file(const std::string& dir) {
  const std::string lock = (fs::path(dir) / "lock.mdb").string();
  // A link in its place is refused: LMDB would write its lock header into whatever file it names
  // (another user's link in a store root opened made root overwrite a file of root's).
  struct stat st {};
  if (::lstat(lock.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    return error(storage_errc::lmdb_error, lock + ": not a regular file (a link?): refused");
  int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return std::nullopt;  // mdb_env_open says why (a read-only directory, a missing one)
  int rc = ::posix_fallocate(fd, 0, 64 * 1024);
  ::close(fd);
  if (rc == 0 || rc == EOPNOTSUPP || rc == EINVAL) return std::nullopt;
  if (auto f = disk_fault(rc, dir, "open (the lock file)")) return f;
  return error(storage_errc::lmdb_error, lock + ": allocating: " + std::strerror(rc));
}
}  // namespace

error lmdb_error(int rc, const std::string& what) {
  // `what` starts with the environment's directory: "<dir>: commit".
  auto colon = what.find(": ");
  std::string dir = what.substr(0, colon), doing = colon == std::string::npos ? "" : what.substr(colon + 2);
  if (auto f = disk_fault(rc, dir, doing)) return *f;
  auto code = rc == MDB_MAP_FULL           ? storage_errc::map_full
              : rc == MDB_NOTFOUND         ? storage_errc::not_found
              : rc == MDB_VERSION_MISMATCH ? storage_errc::version_mismatch
                                           : storage_errc::lmdb_error;
  return error(code, what + ": " + mdb_strerror(rc));
}

lmdb_env::lmdb_env(std::string dir, env_options opts)
    : dir_(std::move(dir)),
      opts_(opts),
      gate_(std::make_unique<gate>()),
      dbis_(std::make_unique<dbi_cache>()) {}

lmdb_env::~lmdb_env() {
  writer_.reset();  // joins the writer: no write txn is open past this point
  if (env_) mdb_env_close(env_);
}

expected<std::shared_ptr<lmdb_env>> lmdb_env::open(const std::string& dir, env_options opts) {
  std::error_code made, ec;
  if (!opts.read_only) fs::create_directories(dir, made);
  if (!fs::is_directory(dir, ec))  // a read-only filesystem, a file in the way: say why it was not made
    return make_unexpected(storage_errc::not_found, dir + (made ? ": cannot be made: " + made.message()
                                                                : std::string(": no such directory")));
  std::string key = fs::canonical(dir, ec).string();
  if (ec) return make_unexpected(storage_errc::io_error, dir + ": " + ec.message());
  std::lock_guard l(registry_mu);
  if (auto existing = registry()[key].lock()) {
    if (existing->opts_.read_only && !opts.read_only)
      return make_unexpected(storage_errc::invalid_argument,
                             dir + ": already open read-only in this process");
    return existing;
  }
  std::shared_ptr<lmdb_env> env(new lmdb_env(dir, opts));
  if (auto r = env->init(); !r) return r.err();
  registry()[key] = env;
  return env;
}

expected<void> lmdb_env::init() {
  if (opts_.read_only && !fs::exists(fs::path(dir_) / "data.mdb"))
    return make_unexpected(storage_errc::not_found, dir_ + ": no LMDB data file (data.mdb)");
  if (auto f = reserve_lock_file(dir_)) return make_unexpected(std::move(*f));
  if (int rc = mdb_env_create(&env_); rc != 0) return lmdb_error(rc, dir_ + ": create env");
  mdb_env_set_maxdbs(env_, opts_.max_dbs);
  mdb_env_set_mapsize(env_, opts_.initial_map_size);
  unsigned flags = MDB_NOTLS | (opts_.read_only ? MDB_RDONLY : 0u) | (opts_.no_sync ? MDB_NOSYNC : 0u);
  if (int rc = mdb_env_open(env_, dir_.c_str(), flags, 0644); rc != 0)
    return lmdb_error(rc, dir_ + ": open (not an LMDB environment, or unreadable)");
  int dead = 0;
  mdb_reader_check(env_, &dead);
  if (auto t = check_truncation(); !t) return t;
  MDB_envinfo info;
  mdb_env_info(env_, &info);
  if (info.me_mapsize > opts_.initial_map_size) opts_.initial_map_size = info.me_mapsize;
  if (!opts_.read_only) writer_ = std::make_unique<lmdb_writer>(*this);
  return {};
}

// Pages past the end of data.mdb would SIGBUS when read. LMDB itself may leave free pages below
// its high-water mark unwritten (a killed writer does), so a short file is not proof of damage.
// A writable environment is extended with zero pages (fallocate: never shrinks, never overwrites
// what another process wrote): a page lost to real truncation then reads as zeros, which LMDB
// reports as MDB_CORRUPTED and the record/checkpoint checksums as corrupt. A read-only one is
// refused.
expected<void> lmdb_env::check_truncation() const {
  MDB_envinfo info;
  MDB_stat st;
  mdb_env_info(env_, &info);
  mdb_env_stat(env_, &st);
  const std::string data = (fs::path(dir_) / "data.mdb").string();
  const std::uint64_t claimed = (info.me_last_pgno + 1) * std::uint64_t{st.ms_psize};
  int fd = ::open(data.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0 && opts_.read_only) fd = ::open(data.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat fst {};
  int rc = ::fstat(fd, &fst);
  const auto size = static_cast<std::uint64_t>(fst.st_size);
  bool ok = rc != 0 || size >= claimed ||
            (!opts_.read_only &&
             ::fallocate(fd, 0, static_cast<off_t>(size), static_cast<off_t>(claimed - size)) == 0);
  ::close(fd);
  if (ok) return {};
  return make_unexpected(storage_errc::lmdb_error, data + ": truncated (" + std::to_string(size) +
                                                       " bytes, pages up to " + std::to_string(claimed) +
                                                       " in use)");
}

std::size_t lmdb_env::map_size() const {
  MDB_envinfo info;
  mdb_env_info(env_, &info);
  return info.me_mapsize;
}

void lmdb_env::reader_enter() const {
  std::unique_lock l(gate_->mu);
  gate_->cv.wait(l, [&] { return !gate_->resizing; });
  ++gate_->readers;
}

void lmdb_env::reader_exit() const {
  std::lock_guard l(gate_->mu);
  --gate_->readers;
  gate_->cv.notify_all();
}

std::uint64_t lmdb_env::map_generation() const {
  return gate_->maps.load();
}

expected<void> lmdb_env::resize(std::size_t new_size) {
  std::unique_lock l(gate_->mu);
  gate_->cv.wait(l, [&] { return !gate_->resizing; });
  gate_->resizing = true;
  bool idle = gate_->cv.wait_for(l, resize_wait, [&] { return gate_->readers == 0; });
  int rc = idle ? mdb_env_set_mapsize(env_, new_size) : 0;
  if (idle && rc == 0) gate_->maps.fetch_add(1);
  gate_->resizing = false;
  gate_->cv.notify_all();
  if (!idle)
    return make_unexpected(storage_errc::map_full,
                           dir_ + ": cannot grow the map while read transactions stay open");
  if (rc != 0) return lmdb_error(rc, dir_ + ": set map size " + std::to_string(new_size));
  return {};
}

expected<MDB_txn*> lmdb_env::begin_raw_read() {
  for (int tries = 0;; ++tries) {
    reader_enter();
    MDB_txn* txn = nullptr;
    int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn);
    if (rc == 0) return txn;
    reader_exit();
    if (rc != MDB_MAP_RESIZED || tries > 3) return lmdb_error(rc, dir_ + ": begin read");
    if (auto r = resize(0); !r) return r.err();
  }
}

expected<read_txn> lmdb_env::begin_read() {
  auto txn = begin_raw_read();
  if (!txn) return txn.err();
  // open() hands out shared_ptrs only; the txn keeps the env alive.
  return read_txn(shared_from_this(), *txn);
}

expected<dbi> lmdb_env::open_db(const std::string& name, unsigned flags) {
  std::lock_guard l(dbis_->mu);
  if (auto it = dbis_->handles.find(name); it != dbis_->handles.end()) return it->second;
  dbi handle = 0;
  if (opts_.read_only || !(flags & MDB_CREATE)) {
    auto txn = begin_raw_read();
    if (!txn) return txn.err();
    int rc = mdb_dbi_open(*txn, name.c_str(), flags, &handle);
    rc = rc == 0 ? mdb_txn_commit(*txn) : (mdb_txn_abort(*txn), rc);
    reader_exit();
    if (rc != 0) return lmdb_error(rc, dir_ + ": open database '" + name + "'");
  } else {
    auto r = write([&](write_txn& w) -> expected<void> {
      auto h = w.open_db(name, flags);
      if (!h) return h.err();
      handle = *h;
      return {};
    });
    if (!r) return r.err();
  }
  dbis_->handles[name] = handle;
  return handle;
}

std::future<expected<void>> lmdb_env::submit(write_fn fn) {
  if (!writer_) {
    std::promise<expected<void>> p;
    p.set_value(make_unexpected(storage_errc::invalid_argument, dir_ + ": write on a read-only environment"));
    return p.get_future();
  }
  return writer_->submit(std::move(fn));
}

expected<void> lmdb_env::write(write_fn fn) {
  if (writer_ && writer_->on_writer_thread())
    return make_unexpected(storage_errc::invalid_argument,
                           dir_ + ": write() called from inside a write function (would deadlock)");
  return submit(std::move(fn)).get();
}

std::string be64_key(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[i] = static_cast<char>(v & 0xff);
  return s;
}

std::uint64_t from_be64(std::string_view s) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < 8 && i < s.size(); ++i) v = (v << 8) | static_cast<unsigned char>(s[i]);
  return v;
}

}  // namespace troupe::storage
