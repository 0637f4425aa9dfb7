#include "troupe/job/data_model.hpp"

#include "troupe/job/data.hpp"

namespace troupe::job {

expected<std::unique_ptr<nn::model>> build_model(const job_spec& spec, const storage::record_store& train) {
  return build_model(spec, train.info(), train.dir());
}

expected<std::unique_ptr<nn::model>> build_model(const job_spec& spec, const storage::manifest& train,
                                                 const std::string& name) {
  return nn::model_registry::instance().create(spec.nn.model, info_of(train, name));
}

}  // namespace troupe::job
