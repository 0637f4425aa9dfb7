#include "troupe/model/model_dir.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace troupe::model {

using nlohmann::json;

namespace {

// model.json is small; anything much larger is not one.
constexpr std::size_t max_model_json_bytes = 16 << 20;

// Reads the fields of model.json, recording the first problem with the key's dotted name.
class fields {
 public:
  const std::string& problem() const { return problem_; }
  void fail(const std::string& text) {
    if (problem_.empty()) problem_ = text;
  }

  const json* find(const json& obj, const std::string& key) const {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }

  std::string str(const json& obj, const std::string& key, const std::string& name, bool required) {
    const json* v = find(obj, key);
    if (!v) {
      if (required) fail(name + ": missing");
      return "";
    }
    if (!v->is_string()) {
      fail(name + ": expected a string, got " + std::string(v->type_name()));
      return "";
    }
    return v->get<std::string>();
  }

  std::int64_t integer(const json& obj, const std::string& key, const std::string& name, bool required,
                       std::int64_t min = 0) {
    const json* v = find(obj, key);
    if (!v) {
      if (required) fail(name + ": missing");
      return 0;
    }
    if (!v->is_number_integer()) {
      fail(name + ": expected an integer, got " + v->dump());
      return 0;
    }
    auto x = v->get<std::int64_t>();
    if (x < min) {
      fail(name + ": " + std::to_string(x) + " is below " + std::to_string(min));
      return 0;
    }
    return x;
  }

  std::vector<std::string> strings(const json& obj, const std::string& key, const std::string& name) {
    std::vector<std::string> out;
    const json* v = find(obj, key);
    if (!v) return out;
    if (!v->is_array()) {
      fail(name + ": expected an array of strings");
      return out;
    }
    for (std::size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) {
        fail(name + "[" + std::to_string(i) + "]: expected a string, got " + (*v)[i].dump());
        return {};
      }
      out.push_back((*v)[i].get<std::string>());
    }
    return out;
  }

 private:
  std::string problem_;
};

void read_forward(fields& f, const json& root, model_info& m) {
  auto forward = f.strings(root, "forward", "forward");
  if (forward == std::vector<std::string>{"dense"})
    m.takes_ids = false;
  else if (forward == std::vector<std::string>{"dense", "ids"})
    m.takes_ids = true;
  else
    f.fail("forward: expected [\"dense\"] or [\"dense\", \"ids\"], got " + json(forward).dump());
  m.dense_dim = static_cast<std::size_t>(f.integer(root, "dense_dim", "dense_dim", true));
  m.fields = static_cast<std::size_t>(f.integer(root, "fields", "fields", false));
  m.buckets_per_field =
      static_cast<std::uint64_t>(f.integer(root, "buckets_per_field", "buckets_per_field", false));
  if (!f.problem().empty()) return;
  if (m.takes_ids && m.fields == 0)
    f.fail("fields: 0, but forward takes ids (a model with sparse fields has fields >= 1)");
  if (!m.takes_ids && m.fields != 0)
    f.fail("fields: " + std::to_string(m.fields) +
           ", but forward takes dense only (forward: [\"dense\", \"ids\"] for sparse fields)");
  if (m.dense_dim == 0 && !m.takes_ids) f.fail("dense_dim: 0, and the model takes no ids: it has no input");
}

void read_output(fields& f, const json& root, model_info& m) {
  const json* out = f.find(root, "output");
  if (!out || !out->is_object()) {
    f.fail(out ? "output: expected an object" : "output: missing");
    return;
  }
  auto kind = f.str(*out, "kind", "output.kind", true);
  m.classes = static_cast<std::size_t>(f.integer(*out, "classes", "output.classes", true, 1));
  m.logits = static_cast<std::size_t>(f.integer(*out, "logits", "output.logits", true, 1));
  if (!f.problem().empty()) return;
  if (kind == "binary") {
    m.kind = output_kind::binary;
    if (m.classes != 2)
      f.fail("output.classes is " + std::to_string(m.classes) + ", but a binary model has 2");
    if (m.logits != 1) f.fail("output.logits is " + std::to_string(m.logits) + ", but a binary model has 1");
  } else if (kind == "multiclass") {
    m.kind = output_kind::multiclass;
    if (m.classes < 2)
      f.fail("output.classes is " + std::to_string(m.classes) + ", a multiclass model has at least 2");
    if (m.logits != m.classes)
      f.fail("output.logits is " + std::to_string(m.logits) + ", but a multiclass model of " +
             std::to_string(m.classes) + " classes has " + std::to_string(m.classes));
  } else {
    f.fail("output.kind: expected \"binary\" or \"multiclass\", got \"" + kind + "\"");
  }
  m.class_names = f.strings(root, "class_names", "class_names");
  if (f.problem().empty() && !m.class_names.empty() && m.class_names.size() != m.classes)
    f.fail("class_names has " + std::to_string(m.class_names.size()) + " names for " +
           std::to_string(m.classes) + " classes");
}

// columns.standardize ({"col": {"mean": m, "std": s}}) and columns.fill ({"col": value}).
void read_column_numbers(fields& f, const json& c, model_columns& cols) {
  if (const json* s = f.find(c, "standardize")) {
    if (!s->is_object()) return f.fail("columns.standardize: expected an object");
    for (auto& [name, v] : s->items()) {
      const json* mean = f.find(v, "mean");
      const json* sd = f.find(v, "std");
      if (!mean || !sd || !mean->is_number() || !sd->is_number())
        return f.fail("columns.standardize." + name + ": expected {\"mean\": number, \"std\": number}");
      cols.standardize[name] = {mean->get<double>(), sd->get<double>()};
    }
  }
  if (const json* fill = f.find(c, "fill")) {
    if (!fill->is_object()) return f.fail("columns.fill: expected an object");
    for (auto& [name, v] : fill->items()) {
      if (!v.is_number()) return f.fail("columns.fill." + name + ": expected a number");
      cols.fill[name] = v.get<double>();
    }
  }
}

void read_columns(fields& f, const json& root, model_info& m) {
  const json* c = f.find(root, "columns");
  if (!c) return;
  if (!c->is_object()) return f.fail("columns: expected an object");
  model_columns cols;
  if (f.find(*c, "header")) cols.header = f.strings(*c, "header", "columns.header");
  cols.label = f.str(*c, "label", "columns.label", false);
  cols.dense = f.strings(*c, "dense", "columns.dense");
  cols.sparse = f.strings(*c, "sparse", "columns.sparse");
  if (auto d = f.str(*c, "delimiter", "columns.delimiter", false); !d.empty()) cols.delimiter = d;
  if (auto h = f.str(*c, "hash", "columns.hash", false); !h.empty()) cols.hash = h;
  if (auto x = f.str(*c, "missing", "columns.missing", false); !x.empty()) cols.missing = x;
  read_column_numbers(f, *c, cols);
  if (!f.problem().empty()) return;
  if (cols.dense.size() != m.dense_dim)
    return f.fail("columns.dense names " + std::to_string(cols.dense.size()) + " columns, but dense_dim is " +
                  std::to_string(m.dense_dim));
  if (cols.sparse.size() != m.fields)
    return f.fail("columns.sparse names " + std::to_string(cols.sparse.size()) + " columns, but fields is " +
                  std::to_string(m.fields));
  if (cols.missing != "error" && cols.missing != "zero" && cols.missing != "mean" &&
      cols.missing != "skip-row")
    return f.fail("columns.missing: expected error, zero, mean or skip-row, got \"" + cols.missing + "\"");
  if (cols.missing == "mean")
    for (const auto& d : cols.dense)
      if (!cols.fill.count(d))
        return f.fail("columns.fill: no value for dense column '" + d + "' (missing is mean)");
  m.columns = std::move(cols);
}

void read_origin(fields& f, const json& root, model_info& m) {
  const json* j = f.find(root, "job");
  if (!j) return;
  if (!j->is_object()) return f.fail("job: expected an object");
  m.job.id = f.str(*j, "id", "job.id", false);
  m.job.strategy = f.str(*j, "strategy", "job.strategy", false);
  m.job.from = f.str(*j, "from", "job.from", false);
  m.job.epochs = f.integer(*j, "epochs", "job.epochs", false);
  m.job.step = f.integer(*j, "step", "job.step", false);
}

std::string base_name(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  auto slash = d.rfind('/');
  std::string name = slash == std::string::npos ? d : d.substr(slash + 1);
  // jobs/<id>/model: the job's id names it better than "model".
  if (name == "model" && slash != std::string::npos && slash > 0) return base_name(d.substr(0, slash));
  return name;
}

}  // namespace

std::string to_string(output_kind k) {
  return k == output_kind::binary ? "binary" : "multiclass";
}

std::string model_info::version() const {
  return (job.id.empty() ? base_name(dir) : job.id) + "@" + std::to_string(created_unix_ms);
}

expected<model_info> parse_model_json(const std::string& text, const std::string& dir) {
  std::string file = dir + "/model.json";
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 5: ..." without its tag.
    std::string why = e.what();
    if (auto tag = why.find("] "); why.rfind("[json.", 0) == 0 && tag != std::string::npos)
      why.erase(0, tag + 2);
    return make_unexpected(core_errc::parse_error, file + ": not JSON: " + why);
  }
  if (!root.is_object()) return make_unexpected(core_errc::parse_error, file + ": expected a JSON object");
  fields f;
  model_info m;
  m.dir = dir;
  m.pt_path = dir + "/model.pt";
  if (auto format = f.str(root, "format", "format", true); f.problem().empty() && format != "troupe-model")
    f.fail("format: \"" + format + "\", expected \"troupe-model\"");
  auto version = f.integer(root, "format_version", "format_version", true, 1);
  if (f.problem().empty() && version > kModelFormatVersion)
    f.fail("format_version " + std::to_string(version) + ": this troupe reads format_version " +
           std::to_string(kModelFormatVersion) + " (a newer troupe wrote it)");
  m.troupe_version = f.str(root, "troupe_version", "troupe_version", false);
  m.model = f.str(root, "model", "model", true);
  if (f.problem().empty()) read_forward(f, root, m);
  if (f.problem().empty()) read_output(f, root, m);
  if (f.problem().empty()) read_columns(f, root, m);
  if (f.problem().empty()) read_origin(f, root, m);
  m.created_unix_ms = f.integer(root, "created_unix_ms", "created_unix_ms", false);
  if (!f.problem().empty()) return make_unexpected(core_errc::parse_error, file + ": " + f.problem());
  return m;
}

namespace {
// Where `dir` is (or would be) a job's model/ and that job has none yet: what to do about it.
std::string no_model_yet(const std::string& job) {
  struct stat js {};
  if (::stat((job + "/job.toml").c_str(), &js) != 0) return "";
  return " (job " + job + " has written no model yet: a job writes " + job +
         "/model as it ends; `troupe export " + job + "` writes one from its latest checkpoint now)";
}

// `dir` cannot be read (errno `err`); where it is a job's model/ not written yet, that said.
unexpected missing_dir(const std::string& dir, int err) {
  std::string trimmed = dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const auto slash = trimmed.rfind('/');
  const std::string job = slash == std::string::npos ? "." : trimmed.substr(0, slash);
  auto hint = trimmed.substr(slash == std::string::npos ? 0 : slash + 1) == "model" ? no_model_yet(job) : "";
  return make_unexpected(core_errc::io_error,
                         dir + ": " + std::strerror(err) + (hint.empty() ? " (a model directory)" : hint));
}
}  // namespace

expected<model_info> read_model_dir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return missing_dir(dir, errno);
  if (!S_ISDIR(st.st_mode))
    return make_unexpected(core_errc::io_error,
                           dir + ": not a directory (a model directory holds model.pt and model.json)");
  for (const char* name : {"model.pt", "model.json"}) {
    std::string p = dir + "/" + name;
    if (::stat(p.c_str(), &st) != 0) {
      const int err = errno;
      // A job's directory given for its model (as [model] init takes it): say where the model is.
      std::string hint = " (a model directory holds model.pt and model.json)";
      if (struct stat js{}; ::stat((dir + "/job.toml").c_str(), &js) == 0)
        hint = ::stat((dir + "/model").c_str(), &js) == 0 ? std::string(" (")
                                                                .append(dir)
                                                                .append(" is a job directory: its model is ")
                                                                .append(dir)
                                                                .append("/model)")
                                                          : no_model_yet(dir);
      return make_unexpected(core_errc::io_error, p + ": " + std::strerror(err) + hint);
    }
    if (!S_ISREG(st.st_mode)) return make_unexpected(core_errc::io_error, p + ": not a regular file");
  }
  std::string path = dir + "/model.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_unexpected(core_errc::io_error, path + ": cannot be read: " + std::strerror(errno));
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > max_model_json_bytes)
      return make_unexpected(core_errc::parse_error, path + ": larger than 16 MiB: not a model.json");
  }
  return parse_model_json(text, dir);
}

namespace {
// The raw rows (/rows) clients of `a` send, against what `b` reads: every column `b` encodes must be
// one `a`'s clients send (a model trained on a CSV whose header was renamed was swapped to, and every
// /rows request failed "missing column"). How each is encoded (hash, standardization) may change.
std::string raw_row_incompatibility(const model_info& a, const model_info& b) {
  if (!a.columns) return "";
  if (!b.columns)
    return "the served model takes raw rows (/rows: its data came from troupe data import csv), the new one "
           "does not";
  std::set<std::string> sent(a.columns->dense.begin(), a.columns->dense.end());
  sent.insert(a.columns->sparse.begin(), a.columns->sparse.end());
  for (const auto* cols : {&b.columns->dense, &b.columns->sparse})
    for (const auto& c : *cols)
      if (!sent.count(c)) {
        std::string have;
        for (const auto& s : sent) have += (have.empty() ? "" : ", ") + s;
        return "the new one reads the column '" + c + "', which the served model's raw rows do not have (" +
               have + ")";
      }
  return "";
}
}  // namespace

std::string incompatibility(const model_info& a, const model_info& b) {
  auto differs = [](const char* before, auto x, const char* after, auto y) {
    std::ostringstream s;
    s << "the served model " << before << x << after << ", the new one " << before << y << after;
    return s.str();
  };
  auto inputs = [](const model_info& m) {
    return !m.takes_ids      ? "dense values only"
           : m.dense_dim > 0 ? "dense values and sparse ids"
                             : "sparse ids only";
  };
  if (a.takes_ids != b.takes_ids) return differs("takes ", inputs(a), "", inputs(b));
  if (a.dense_dim != b.dense_dim) return differs("takes ", a.dense_dim, " dense values a row", b.dense_dim);
  if (a.fields != b.fields) return differs("takes ", a.fields, " sparse fields a row", b.fields);
  // Another id space: a client's ids (field f's id i is f x buckets + i) would read other rows.
  if (a.takes_ids && a.buckets_per_field != b.buckets_per_field)
    return differs("reads ids of ", a.buckets_per_field, " buckets a field", b.buckets_per_field);
  if (a.kind != b.kind) return differs("is ", to_string(a.kind), "", to_string(b.kind));
  if (a.logits != b.logits) return differs("gives ", a.logits, " logits a row", b.logits);
  // Class ids that name other classes: a client reading class_ids or class_names would read the
  // new model's answers as the old classes.
  auto names = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& n : v) s += (s.empty() ? "" : ", ") + n;
    return v.empty() ? std::string("none") : "classes (" + s + ")";
  };
  if (a.class_names != b.class_names)
    return differs("names ", names(a.class_names), "", names(b.class_names));
  return raw_row_incompatibility(a, b);
}

}  // namespace troupe::model
