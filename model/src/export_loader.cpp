#include "troupe/model/exporter.hpp"
#include "troupe/model/plugin.hpp"

namespace troupe::model {

expected<export_result> export_torchscript(const export_request& request) {
  using export_fn = bool (*)(int, const export_request*, export_result*);
  auto s = torchscript_symbol("troupe_torchscript_export");
  if (!s) return s.err();
  export_result out;
  if (!reinterpret_cast<export_fn>(*s)(kExportAbi, &request, &out))
    return make_unexpected(plugin_error(out.error));  // a full disk stays one (exit 1, not 2)
  return out;
}

}  // namespace troupe::model
