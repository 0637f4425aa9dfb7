// The predictor factory of libtroupe_torchscript.so (predictor.hpp), through the plugin's loader
// (plugin.hpp).
#include "troupe/model/model_dir.hpp"
#include "troupe/model/plugin.hpp"
#include "troupe/model/predictor.hpp"
#include "troupe/nn/zip_check.hpp"

namespace troupe::model {

predictor_options options_for(const model_info& m) {
  predictor_options o;
  o.path = m.pt_path;
  o.takes_ids = m.takes_ids;
  o.dense_dim = m.dense_dim;
  o.fields = m.fields;
  o.width = m.logits;
  return o;
}

expected<std::unique_ptr<predictor>> load_predictor(const predictor_options& o) {
  // libtorch reads the archive's entries unchecked: a flipped byte in a tensor loaded silently.
  if (auto c = nn::check_zip_archive(o.path); !c) return c.err();
  using create_fn = predictor* (*)(int, const predictor_options*, std::string*);
  auto sym = torchscript_symbol("troupe_torchscript_create_predictor");
  if (!sym) return sym.err();
  std::string error;
  std::unique_ptr<predictor> made(reinterpret_cast<create_fn>(*sym)(kPredictorAbi, &o, &error));
  if (!made) return make_unexpected(plugin_error(error));
  return made;
}

}  // namespace troupe::model
