// The master's side of the GPU communicator rendezvous: records posts, answers fetches, one
// GpuCommInfo per request (docs/gpu_workers.md).
#include <spdlog/spdlog.h>

#include "master_state.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::actors {

void on_gpu_comm(master_state& st, const message& m) {
  auto j = m.body().getJob();
  auto o = wire::job_reply(m);
  auto info = o.body.initGpuCommInfo();
  if (j.which() == schema::JobMessage::GPU_COMM_POST) {
    auto p = j.getGpuCommPost();
    auto s = st.gpu.add(wire::read_gpu_post(p));
    if (!s) spdlog::warn("gpu comm post from {} refused: {}", m.from_node().to_string(), s.err().to_string());
    wire::write_gpu_info(info, s);
  } else {
    auto f = j.getGpuCommFetch();
    wire::write_gpu_info(info, st.gpu.get(f.getRingEpoch()));
  }
  if (auto r = st.ctx->reply(m, std::move(o.out), "master"); !r)
    spdlog::debug("gpu comm info to {}: {}", m.from_node().name, r.err().to_string());
}

}  // namespace troupe::actors
