// A thread of a TCP ring link that writes one transfer's outgoing half while the link's caller reads
// (and adds) the incoming half. On one thread, every byte the next rank is sent waits while this
// rank copies and reduces what it receives, and the other way round; on two, the kernel's send path
// (which on a veth pair also runs the next rank's TCP receive) and this rank's receive and reduction
// run at once on separate cores.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "troupe/collective/ring.hpp"

namespace troupe::collective::tcp_detail {

// One job at a time: start() hands it over, finish() waits for its result. The thread starts with
// the object and is joined by the destructor (which waits for a running job).
// Threads: start() and finish() are called by the one thread that uses the link.
class send_thread {
 public:
  using job = std::function<expected<void>()>;
  send_thread();
  ~send_thread();
  send_thread(const send_thread&) = delete;
  send_thread& operator=(const send_thread&) = delete;

  // Runs `j` on the thread. The previous job must have been finished.
  void start(job j);
  // The started job's result, once it has returned.
  expected<void> finish();

 private:
  void run();
  std::mutex m_;
  std::condition_variable cv_;
  std::optional<job> job_;
  std::optional<expected<void>> result_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace troupe::collective::tcp_detail
