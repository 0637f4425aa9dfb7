#include "troupe/collective/shm/liveness.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include "leftovers.hpp"

namespace troupe::collective {

namespace {

struct segment {
  pthread_mutex_t mutex;
};

std::string path_of(const std::string& name) {
  return "/" + name;
}

error sys_error(const std::string& what, const std::string& name) {
  return error(core_errc::io_error, what + " /" + name + ": " + std::strerror(errno));
}

}  // namespace

struct liveness_beacon::impl {
  std::string name;
  int fd = -1;
  segment* seg = nullptr;
  std::thread holder;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;

  ~impl() {
    if (holder.joinable()) {
      {
        std::lock_guard lk(mu);
        stop = true;
      }
      cv.notify_all();
      holder.join();
    }
    if (seg) ::munmap(seg, sizeof(segment));
    if (fd >= 0) ::close(fd);
    ::shm_unlink(path_of(name).c_str());
  }

  // Locks the robust mutex on this thread and keeps it until stop (then unlocks it, on the same
  // thread, as a robust mutex requires).
  void hold(std::promise<int>& locked) {
    int r = ::pthread_mutex_lock(&seg->mutex);
    locked.set_value(r);
    if (r != 0) return;
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return stop; });
    ::pthread_mutex_unlock(&seg->mutex);
  }
};

liveness_beacon::liveness_beacon(std::unique_ptr<impl> p) : p_(std::move(p)) {}
liveness_beacon::~liveness_beacon() = default;

std::string liveness_beacon::name_for(const std::string& job, const std::string& node) {
  std::string n = "troupe-" + job + "-live-" + node;
  for (auto& c : n)
    if (c == '/' || c == '#') c = '_';
  return n;
}

expected<std::unique_ptr<liveness_beacon>> liveness_beacon::start(const std::string& name) {
  auto p = std::make_unique<impl>();
  p->name = name;
  ::shm_unlink(path_of(name).c_str());
  p->fd = ::shm_open(path_of(name).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (p->fd < 0) return make_unexpected(sys_error("shm_open", name));
  if (::ftruncate(p->fd, sizeof(segment)) != 0) return make_unexpected(sys_error("ftruncate", name));
  void* m = ::mmap(nullptr, sizeof(segment), PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
  if (m == MAP_FAILED) return make_unexpected(sys_error("mmap", name));
  p->seg = static_cast<segment*>(m);
  pthread_mutexattr_t a;
  ::pthread_mutexattr_init(&a);
  ::pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  ::pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  int r = ::pthread_mutex_init(&p->seg->mutex, &a);
  ::pthread_mutexattr_destroy(&a);
  if (r != 0)
    return make_unexpected(core_errc::io_error, "pthread_mutex_init /" + name + ": " + std::strerror(r));
  std::promise<int> locked;
  auto f = locked.get_future();
  impl* raw = p.get();
  p->holder = std::thread([raw, &locked] { raw->hold(locked); });
  if (int lr = f.get(); lr != 0)
    return make_unexpected(core_errc::io_error, "pthread_mutex_lock /" + name + ": " + std::strerror(lr));
  return std::unique_ptr<liveness_beacon>(new liveness_beacon(std::move(p)));
}

liveness_watch::liveness_watch(std::string name, int fd, void* map)
    : name_(std::move(name)), fd_(fd), map_(map) {}

liveness_watch::~liveness_watch() {
  if (map_) ::munmap(map_, sizeof(segment));
  if (fd_ >= 0) ::close(fd_);
}

void liveness_beacon::remove(const std::string& name) {
  ::shm_unlink(path_of(name).c_str());
}

bool liveness_beacon::released(const std::string& name) {
  auto w = liveness_watch::open(name);
  return w && w->gone();
}

std::unique_ptr<liveness_watch> liveness_watch::open(const std::string& name) {
  int fd = ::shm_open(path_of(name).c_str(), O_RDWR, 0);
  if (fd < 0) return nullptr;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < sizeof(segment)) {
    ::close(fd);  // not (yet) a complete beacon
    return nullptr;
  }
  void* m = ::mmap(nullptr, sizeof(segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<liveness_watch>(new liveness_watch(name, fd, m));
}

bool liveness_watch::gone() {
  if (gone_) return true;
  auto* seg = static_cast<segment*>(map_);
  int r = ::pthread_mutex_trylock(&seg->mutex);
  if (r == EBUSY) return false;
  // Killed holder: make the mutex usable again so that other watchers see it released too.
  if (r == EOWNERDEAD) ::pthread_mutex_consistent(&seg->mutex);
  if (r == 0 || r == EOWNERDEAD) ::pthread_mutex_unlock(&seg->mutex);
  // Any other answer (ENOTRECOVERABLE: a watcher died holding it) also means the holder is gone.
  gone_ = true;
  return true;
}

expected<std::unique_ptr<liveness::beacon>> shm_liveness::start(const node_id& self) {
  auto b = liveness_beacon::start(liveness_beacon::name_for(job_, self.to_string()));
  if (!b) return b.err();
  return std::unique_ptr<beacon>(std::move(*b));
}

bool shm_liveness::gone(const node_id& node) {
  return liveness_beacon::released(liveness_beacon::name_for(job_, node.to_string()));
}

std::unique_ptr<liveness::watch> shm_liveness::watch_node(const node_id& node) {
  return liveness_watch::open(liveness_beacon::name_for(job_, node.to_string()));
}

void shm_liveness::remove(const node_id& node) {
  liveness_beacon::remove(liveness_beacon::name_for(job_, node.to_string()));
}

void shm_liveness::remove_all() {
  remove_shm_leftovers(job_, shm_leftovers::beacons);
}

std::unique_ptr<liveness> make_host_liveness(const std::string& job) {
  return std::make_unique<shm_liveness>(job);
}

}  // namespace troupe::collective
