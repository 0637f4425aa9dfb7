#include "data_model.hpp"

#include "troupe/actors/data.hpp"

namespace troupe::actors {

expected<std::unique_ptr<nn::model>> build_model(const job_spec& spec, const storage::record_store& train) {
  auto info = info_of(train.info(), train.dir());
  return nn::model_registry::instance().create(spec.nn.model, info);
}

}  // namespace troupe::actors
