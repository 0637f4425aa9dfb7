// The model's metadata route (GET /v2/models/<name>): the Open Inference Protocol's fields, its
// inputs and outputs as tensors, and troupe's own (version, generation, replicas, a swap).
#include <nlohmann/json.hpp>

#include "frontend.hpp"

namespace troupe::serve {

namespace {

using nlohmann::json;

json tensor_meta(const char* name, const char* type, std::vector<std::int64_t> shape) {
  return {{"name", name}, {"datatype", type}, {"shape", std::move(shape)}};
}

json inputs_meta(const model::model_info& m) {
  // A model of ids alone lists no dense input (a width-0 one is still accepted).
  json inputs = json::array();
  if (m.dense_dim > 0 || !m.takes_ids)
    inputs.push_back(tensor_meta("dense", "FP32", {-1, static_cast<std::int64_t>(m.dense_dim)}));
  if (m.takes_ids) inputs.push_back(tensor_meta("ids", "INT64", {-1, static_cast<std::int64_t>(m.fields)}));
  return inputs;
}

json outputs_meta(const model::model_info& m, std::int64_t width) {
  json outputs = json::array(
      {tensor_meta("logits", "FP32", {-1, width}), tensor_meta("probabilities", "FP32", {-1, width})});
  if (m.kind == model::output_kind::multiclass) {
    outputs.push_back(tensor_meta("class_ids", "INT64", {-1}));
    if (!m.class_names.empty()) outputs.push_back(tensor_meta("class_names", "BYTES", {-1}));
  }
  return outputs;
}

}  // namespace

observe::http_response frontend::metadata(const model_view& v) {
  const auto& m = v.info;
  auto stats = core_->stats();
  json swap = nullptr;
  {
    std::lock_guard lk(mu_);
    for (const auto& [gen, g] : gens_)
      if (g.state == gen_state::staging)
        swap = {{"state", "loading"},
                {"generation", gen},
                {"version", g.info.version()},
                {"model_dir", g.info.dir}};
    if (swap.is_null() && !last_swap_error_.empty())
      swap = {{"state", "refused"}, {"error", last_swap_error_}};
  }
  json j = {{"name", name_},
            {"versions", {m.version()}},
            {"platform", "pytorch_torchscript"},
            {"inputs", inputs_meta(m)},
            {"outputs", outputs_meta(m, static_cast<std::int64_t>(v.shape.width))},
            {"troupe",
             {{"version", m.version()},
              {"generation", v.generation},
              {"job_id", m.job.id},
              {"created_unix_ms", m.created_unix_ms},
              {"model", m.model},
              {"model_dir", m.dir},
              {"output_kind", model::to_string(m.kind)},
              {"serving_since_ms", v.serving_since_ms},
              {"replicas", cfg_.replicas},
              {"replicas_ready", stats.ready},
              {"max_batch", cfg_.max_batch},
              {"raw_rows", v.rows != nullptr},
              {"swap", swap}}}};
  return {200, "application/json", j.dump(-1, ' ', false, json::error_handler_t::replace), {}};
}

}  // namespace troupe::serve
