// nccl_comm on NCCL's nonblocking API: every call that may wait for peers is polled under a
// deadline, and a communicator that errs or overruns is aborted (NCCL itself never times out).
#include "troupe/gpu/nccl_comm.hpp"

#include <nccl.h>

#include <cstring>

#include "check.hpp"

namespace troupe::gpu {

namespace {

error nccl_error(ncclResult_t rc, ncclComm_t comm, const std::string& call) {
  std::string detail = ncclGetErrorString(rc);
  if (comm) {
    const char* last = ncclGetLastError(comm);
    if (last && *last) detail += std::string(" (") + last + ")";
  }
  // A remote error is a peer gone (or aborted): the caller rebuilds the ring.
  auto code = rc == ncclRemoteError ? gpu_errc::peer_lost : gpu_errc::nccl_failed;
  return error(code, call + ": " + detail);
}

// Polls the communicator's async state until it leaves ncclInProgress, or the deadline passes. Must
// poll: NCCL's nonblocking mode signals nothing (ncclCommGetAsyncError is its only way to tell),
// so each look is followed by a pause of o.poll on the options' clock.
expected<void> wait_ready(ncclComm_t comm, std::chrono::milliseconds limit, const nccl_options& o,
                          const char* what) {
  troupe::clock& clk = o.clock;
  auto deadline = clk.now() + limit;
  while (true) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return nccl_error(rc, comm, std::string("ncclCommGetAsyncError during ") + what);
    if (state == ncclSuccess) return {};
    if (state != ncclInProgress) return nccl_error(state, comm, what);
    if (clk.now() >= deadline)
      return error(gpu_errc::timeout, std::string(what) + ": not done after the watchdog's " +
                                          std::to_string(limit.count()) + " ms");
    clk.sleep_for(o.poll);
  }
}

// Waits for `s` to drain while watching the communicator: a collective stuck on a dead peer never
// completes, but the async error (or the deadline) says so. Must poll: a blocking wait on the
// stream (cudaStreamSynchronize, an event's) cannot be bounded and would hang on a dead peer, and
// NCCL's async error is only a query; so a look, then a pause of o.poll on the options' clock.
expected<void> wait_stream(ncclComm_t comm, cuda_stream s, const nccl_options& o, const char* what) {
  troupe::clock& clk = o.clock;
  auto deadline = clk.now() + o.op_timeout;
  while (true) {
    cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess) return {};
    if (q != cudaErrorNotReady) return cuda_error(q, std::string("cudaStreamQuery after ") + what);
    ncclResult_t state = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return nccl_error(rc, comm, std::string("ncclCommGetAsyncError during ") + what);
    if (state != ncclSuccess && state != ncclInProgress) return nccl_error(state, comm, what);
    if (clk.now() >= deadline)
      return error(gpu_errc::timeout, std::string(what) + ": not complete after " +
                                          std::to_string(o.op_timeout.count()) +
                                          " ms (a peer is gone or stalled)");
    clk.sleep_for(o.poll);
  }
}

// A nonblocking call returns ncclInProgress while it is being enqueued: wait until it is.
expected<void> issued(ncclResult_t rc, ncclComm_t comm, const nccl_options& o, const char* what) {
  if (rc == ncclSuccess) return {};
  if (rc != ncclInProgress) return nccl_error(rc, comm, what);
  return wait_ready(comm, o.op_timeout, o, what);
}

}  // namespace

expected<nccl_unique_id> nccl_unique_id::create() {
  ncclUniqueId raw;
  ncclResult_t rc = ncclGetUniqueId(&raw);
  if (rc != ncclSuccess) return nccl_error(rc, nullptr, "ncclGetUniqueId");
  static_assert(sizeof(raw.internal) == size);
  nccl_unique_id id;
  std::memcpy(id.bytes.data(), raw.internal, size);
  return id;
}

expected<nccl_comm> nccl_comm::init(const nccl_unique_id& id, int nranks, int rank, const nccl_options& o) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return make_unexpected(core_errc::invalid_argument,
                           "nccl init: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  ncclUniqueId raw;
  std::memcpy(raw.internal, id.bytes.data(), nccl_unique_id::size);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = nullptr;
  auto call = "ncclCommInitRankConfig(rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ")";
  ncclResult_t rc = ncclCommInitRankConfig(&comm, nranks, raw, rank, &cfg);
  expected<void> ok;
  if (rc != ncclSuccess && rc != ncclInProgress)
    ok = nccl_error(rc, comm, call);
  else if (!comm)
    ok = error(gpu_errc::nccl_failed, call + ": no communicator returned");
  else
    ok = wait_ready(comm, o.init_timeout, o, call.c_str());
  if (!ok) {
    if (comm) (void)ncclCommAbort(comm);
    return ok.err();
  }
  nccl_comm c;
  c.comm_ = comm;
  c.rank_ = rank;
  c.size_ = nranks;
  c.opt_ = o;
  return c;
}

nccl_comm& nccl_comm::operator=(nccl_comm&& o) noexcept {
  if (this != &o) {
    (void)destroy();
    comm_ = std::exchange(o.comm_, nullptr);
    rank_ = o.rank_;
    size_ = o.size_;
    opt_ = o.opt_;
    broken_ = o.broken_;
  }
  return *this;
}

nccl_comm::~nccl_comm() {
  (void)destroy();
}

void nccl_comm::abort() noexcept {
  if (!comm_) return;
  (void)ncclCommAbort(comm_);
  comm_ = nullptr;
  broken_ = true;
}

expected<void> nccl_comm::destroy() {
  if (!comm_) return {};
  if (broken_) {
    abort();
    return {};
  }
  auto fin = issued(ncclCommFinalize(comm_), comm_, opt_, "ncclCommFinalize");
  if (!fin) {
    abort();
    return fin;
  }
  ncclResult_t rc = ncclCommDestroy(comm_);
  if (rc != ncclSuccess) {
    auto e = nccl_error(rc, comm_, "ncclCommDestroy");
    abort();
    return e;
  }
  comm_ = nullptr;
  return {};
}

expected<void> nccl_comm::allreduce_sum(float* data, std::size_t n, cuda_stream s, float scale) {
  if (!healthy()) return make_unexpected(gpu_errc::peer_lost, "nccl allreduce: the communicator was aborted");
  if (n == 0) return {};
  ncclRedOp_t op = ncclSum;
  bool custom = scale != 1.0f;
  auto fail = [&](expected<void> e) {
    abort();
    return e;
  };
  if (custom) {
    auto made = issued(ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat32, ncclScalarHostImmediate, comm_),
                       comm_, opt_, "ncclRedOpCreatePreMulSum");
    if (!made) return fail(made);
  }
  auto r = issued(ncclAllReduce(data, data, n, ncclFloat32, op, comm_, s), comm_, opt_, "ncclAllReduce");
  if (custom) (void)ncclRedOpDestroy(op, comm_);  // the op is captured at enqueue
  if (!r) return fail(r);
  if (auto w = wait_stream(comm_, s, opt_, "ncclAllReduce"); !w) return fail(w);
  return {};
}

expected<void> nccl_comm::broadcast(float* data, std::size_t n, int root, cuda_stream s) {
  if (!healthy()) return make_unexpected(gpu_errc::peer_lost, "nccl broadcast: the communicator was aborted");
  if (root < 0 || root >= size_)
    return make_unexpected(core_errc::invalid_argument, "nccl broadcast: root " + std::to_string(root) +
                                                            " outside " + std::to_string(size_) + " ranks");
  if (n == 0) return {};
  auto r = issued(ncclBroadcast(data, data, n, ncclFloat32, root, comm_, s), comm_, opt_, "ncclBroadcast");
  if (r) r = wait_stream(comm_, s, opt_, "ncclBroadcast");
  if (!r) abort();
  return r;
}

expected<device_memory> memory_info() {
  device_memory m;
  if (auto c = cuda_check(cudaMemGetInfo(&m.free, &m.total), "cudaMemGetInfo"); !c) return c.err();
  return m;
}

}  // namespace troupe::gpu
