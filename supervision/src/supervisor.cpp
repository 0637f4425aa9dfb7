#include "troupe/supervision/supervisor.hpp"

#include <caf/actor_system.hpp>

#include "supervisor_actor.hpp"

namespace troupe::supervision {

caf::actor spawn_supervisor(caf::actor_system& system, name_registry& names, supervisor_config cfg,
                            std::vector<child_spec> children) {
  return system.spawn<supervisor_actor>(&names, std::move(cfg), std::move(children));
}

child_spec supervisor_child(std::string name, supervisor_config cfg, std::vector<child_spec> children,
                            restart_type restart, std::chrono::milliseconds shutdown) {
  child_spec spec;
  spec.name = std::move(name);
  spec.restart = restart;
  spec.shutdown = shutdown;
  spec.start = [cfg = std::move(cfg), children = std::move(children)](spawn_context& ctx) {
    return spawn_supervisor(ctx.system, ctx.names, cfg, children);
  };
  return spec;
}

}  // namespace troupe::supervision
