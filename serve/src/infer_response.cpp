// The infer answer's JSON (infer_codec.hpp): floats in their shortest exact form (std::to_chars),
// probabilities and class ids computed here from the logits.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "infer_codec.hpp"

namespace troupe::serve {

namespace {

using nlohmann::json;

void append_float(std::string& out, float v) {
  if (!std::isfinite(v)) {
    out += "null";  // JSON has no NaN or infinity
    return;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void open_tensor(std::string& out, bool& first, const char* name, const char* type, std::size_t rows,
                 std::size_t width, bool two_d) {
  out += first ? "{\"name\":\"" : ",{\"name\":\"";
  first = false;
  out += name;
  out += "\",\"datatype\":\"";
  out += type;
  out += "\",\"shape\":[";
  append_int(out, static_cast<std::int64_t>(rows));
  if (two_d) {
    out += ",";
    append_int(out, static_cast<std::int64_t>(width));
  }
  out += "],\"data\":[";
}

void append_logits(std::string& out, bool& first, const float* logits, std::size_t rows, std::size_t w) {
  open_tensor(out, first, "logits", "FP32", rows, w, true);
  for (std::size_t k = 0, n = rows * w; k < n; ++k) {
    if (k) out += ',';
    append_float(out, logits[k]);
  }
  out += "]}";
}

// A binary model's sigmoid of its one logit; a multiclass model's softmax of each row.
void append_probabilities(std::string& out, bool& first, const float* logits, std::size_t rows, std::size_t w,
                          bool multi) {
  open_tensor(out, first, "probabilities", "FP32", rows, w, true);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* l = logits + r * w;
    if (!multi) {
      if (r) out += ',';
      append_float(out, static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(l[0])))));
      continue;
    }
    double m = *std::max_element(l, l + w), sum = 0;
    for (std::size_t c = 0; c < w; ++c) sum += std::exp(static_cast<double>(l[c]) - m);
    for (std::size_t c = 0; c < w; ++c) {
      if (r || c) out += ',';
      append_float(out, static_cast<float>(std::exp(static_cast<double>(l[c]) - m) / sum));
    }
  }
  out += "]}";
}

// A multiclass model's argmax of each row: class_ids and, when the model names them, class_names.
void append_classes(std::string& out, bool& first, const float* logits, std::size_t rows,
                    const model_shape& shape, unsigned want) {
  std::size_t w = shape.width;
  std::vector<std::size_t> best(rows);
  for (std::size_t r = 0; r < rows; ++r)
    best[r] =
        static_cast<std::size_t>(std::max_element(logits + r * w, logits + (r + 1) * w) - (logits + r * w));
  if (want & out_class_ids) {
    open_tensor(out, first, "class_ids", "INT64", rows, 0, false);
    for (std::size_t r = 0; r < rows; ++r) {
      if (r) out += ',';
      append_int(out, static_cast<std::int64_t>(best[r]));
    }
    out += "]}";
  }
  if ((want & out_class_names) && !shape.class_names.empty()) {
    open_tensor(out, first, "class_names", "BYTES", rows, 0, false);
    for (std::size_t r = 0; r < rows; ++r) {
      if (r) out += ',';
      out += json(shape.class_names[best[r]]).dump(-1, ' ', false, json::error_handler_t::replace);
    }
    out += "]}";
  }
}

}  // namespace

std::string encode_infer_response(const std::string& model_name, const std::string& version,
                                  const std::string& id, const float* logits, std::size_t rows,
                                  const model_shape& shape, unsigned outputs) {
  bool multi = shape.kind == model::output_kind::multiclass;
  unsigned all = out_logits | out_probabilities | (multi ? out_class_ids : 0u) |
                 (multi && !shape.class_names.empty() ? out_class_names : 0u);
  unsigned want = outputs ? outputs : all;
  std::size_t w = shape.width;
  std::string out;
  out.reserve(128 + rows * w * 28);
  out += "{\"model_name\":";
  out += json(model_name).dump();
  out += ",\"model_version\":";
  out += json(version).dump();
  if (!id.empty()) {
    out += ",\"id\":";
    out += json(id).dump(-1, ' ', false, json::error_handler_t::replace);
  }
  out += ",\"outputs\":[";
  bool first = true;
  if (want & out_logits) append_logits(out, first, logits, rows, w);
  if (want & out_probabilities) append_probabilities(out, first, logits, rows, w, multi);
  if (multi && (want & (out_class_ids | out_class_names)))
    append_classes(out, first, logits, rows, shape, want);
  out += "]}";
  return out;
}

std::string error_json(std::string_view text) {
  return "{\"error\":" + json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace) + "}";
}

}  // namespace troupe::serve
