#include "tcp/send_thread.hpp"

namespace troupe::collective::tcp_detail {

send_thread::send_thread() : thread_([this] { run(); }) {}

send_thread::~send_thread() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void send_thread::start(job j) {
  {
    std::lock_guard lock(m_);
    job_ = std::move(j);
    result_.reset();
  }
  cv_.notify_all();
}

expected<void> send_thread::finish() {
  std::unique_lock lock(m_);
  cv_.wait(lock, [&] { return result_.has_value(); });
  auto r = std::move(*result_);
  result_.reset();
  return r;
}

void send_thread::run() {
  std::unique_lock lock(m_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || job_.has_value(); });
    if (!job_) return;  // stopping, nothing left to run
    job j = std::move(*job_);
    job_.reset();
    lock.unlock();
    auto r = j();
    lock.lock();
    result_ = std::move(r);
    cv_.notify_all();
  }
}

}  // namespace troupe::collective::tcp_detail
