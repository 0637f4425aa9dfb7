#include "rows_request.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "troupe/observe/job_events.hpp"

namespace troupe::serve {

namespace {

using nlohmann::json;

expected<infer_input> bad(const std::string& text) {
  return make_unexpected(core_errc::invalid_argument, text);
}

// The text each row's cell that is a fraction or exponent number was given as (rows[i] name), as the
// client wrote it: a categorical column hashes a cell's text, as the import hashed the CSV's, and
// json's own text of the double is another ("1000.0" for 1e3, "2.5" for 2.50: an unseen category,
// answered silently). An integer's text is its own (JSON has one form of it).
class number_texts final : public json::json_sax_t {
 public:
  std::map<std::pair<std::size_t, std::string>, std::string> texts;  // (row, column) -> text

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(json::number_integer_t) override { return value(); }
  bool number_unsigned(json::number_unsigned_t) override { return value(); }
  bool number_float(json::number_float_t, const std::string& s) override {
    if (open_.size() == 3 && open_[0].object && open_[0].key == "rows" && !open_[1].object && open_[2].object)
      texts[{static_cast<std::size_t>(open_[1].index), open_[2].key}] = s;
    return value();
  }
  bool string(std::string&) override { return value(); }
  bool binary(json::binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return value(), open_.push_back({true, {}, -1}), true; }
  bool key(std::string& k) override { return open_.back().key = k, true; }
  bool end_object() override { return open_.pop_back(), true; }
  bool start_array(std::size_t) override { return value(), open_.push_back({false, {}, -1}), true; }
  bool end_array() override { return open_.pop_back(), true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  struct frame {
    bool object = false;
    std::string key;
    long index = -1;
  };
  std::vector<frame> open_;
  // A value begins (a scalar, an object, an array): the next index of the array it is in.
  bool value() {
    if (!open_.empty() && !open_.back().object) ++open_.back().index;
    return true;
  }
};

// A cell's text as the CSV would hold it: a number's as the request wrote it (`written`, when the
// request gave it as a fraction or an exponent).
expected<std::string> cell_text(const json& v, const std::string* written, const std::string& where) {
  if (v.is_null()) return std::string();
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return v.dump();
  if (v.is_number_float()) return written ? *written : v.dump();
  // A boolean has no one text: the import hashed the CSV's own ("True" from pandas, "TRUE" from R),
  // and "true" read as another category, silently (it was taken as "true").
  if (v.is_boolean())
    return make_unexpected(core_errc::invalid_argument,
                           where +
                               ": a boolean; send the text the training CSV held for it (pandas writes "
                               "\"True\", R \"TRUE\")");
  return make_unexpected(core_errc::invalid_argument, where + ": a value is a number, a string or null");
}

bool uses(const storage::row_format& f, const std::string& column) {
  return std::find(f.dense.begin(), f.dense.end(), column) != f.dense.end() ||
         std::find(f.sparse.begin(), f.sparse.end(), column) != f.sparse.end();
}

// "outputs" as /infer reads them (an output this model lacks is refused naming those it has).
expected<unsigned> outputs_of(const json& j, const model_shape& shape) {
  if (!j.contains("outputs")) return 0u;
  const auto& o = j["outputs"];
  if (!o.is_array()) return make_unexpected(core_errc::invalid_argument, "'outputs': expected an array");
  unsigned bits = 0;
  for (std::size_t i = 0; i < o.size(); ++i) {
    const std::string where = "outputs[" + std::to_string(i) + "]";
    if (!o[i].is_object() || !o[i].contains("name") || !o[i]["name"].is_string())
      return make_unexpected(core_errc::invalid_argument,
                             where + ": no name; this model's outputs: " + output_names(shape));
    const auto name = o[i]["name"].get<std::string>();
    const unsigned bit = output_bit(name, shape);
    if (bit == 0)
      return make_unexpected(core_errc::invalid_argument,
                             where + ".name '" + name + "': this model's outputs are " + output_names(shape));
    bits |= bit;
  }
  return bits;
}

// Where the parser is (the objects and arrays open), to name a key given twice: "rows[0]".
struct json_place {
  struct frame {
    bool object = false;
    std::set<std::string> keys;
    std::string key;
    long index = -1;
  };
  std::vector<frame> open;
  std::string path() const {
    std::string p;
    for (std::size_t i = 0; i + 1 < open.size(); ++i)
      p += open[i].object ? (p.empty() ? "" : ".") + open[i].key : "[" + std::to_string(open[i].index) + "]";
    return p.empty() ? "the request" : p;
  }
  // Each event; throws std::invalid_argument at a key given twice in one object (json::parse kept
  // the last: a row's {"a": 1, "a": 5} was answered for a = 5, where /infer refuses it).
  bool on(json::parse_event_t e, const json& parsed) {
    using ev = json::parse_event_t;
    const bool starts = e == ev::object_start || e == ev::array_start || e == ev::value;
    if (starts && !open.empty() && !open.back().object) ++open.back().index;
    if (e == ev::object_start || e == ev::array_start) open.push_back({e == ev::object_start, {}, {}, -1});
    if ((e == ev::object_end || e == ev::array_end) && !open.empty()) open.pop_back();
    if (e == ev::key && !open.empty()) {
      auto& f = open.back();
      f.key = parsed.get<std::string>();
      if (!f.keys.insert(f.key).second)
        throw std::invalid_argument(path() + ": the key '" + f.key + "' is given twice");
    }
    return true;
  }
};

// The body parsed; a syntax error, a number beyond a double (1e400) or a key given twice named.
expected<json> parse_body(std::string_view body) {
  try {
    json_place place;
    json j = json::parse(body, [&](int, json::parse_event_t e, json& parsed) { return place.on(e, parsed); });
    if (!j.is_object()) return make_unexpected(core_errc::invalid_argument, "the body is not a JSON object");
    return j;
  } catch (const json::parse_error& e) {
    // As /infer says it: "malformed JSON (byte 2): <what>" ("[json.exception.parse_error.101] parse
    // error at line 1, column 2: syntax error while parsing ..." was the library's own text).
    std::string what = e.what();
    if (auto colon = what.find(": "); colon != std::string::npos) what.erase(0, colon + 2);
    if (what.rfind("syntax error while parsing ", 0) == 0) what.erase(0, 27);
    return make_unexpected(core_errc::invalid_argument,
                           "malformed JSON (byte " + std::to_string(e.byte) + "): " + what);
  } catch (const json::exception& e) {
    std::string what = e.what();  // "[json.exception.out_of_range.406] number overflow ..."
    if (auto close = what.find("] "); what.rfind("[json.", 0) == 0 && close != std::string::npos)
      what.erase(0, close + 2);
    return make_unexpected(core_errc::invalid_argument, "malformed JSON: " + what);
  } catch (const std::invalid_argument& e) {
    return make_unexpected(core_errc::invalid_argument, e.what());
  }
}

// Each row's cells (the columns the model uses) encoded, its values appended to `in`; `texts`: the
// numbers' texts as the body wrote them.
expected<void> encode_rows(const json& rows, const number_texts& texts, const job::row_encoder& enc,
                           infer_input& in) {
  storage::record r;
  std::vector<std::pair<std::string, std::string>> cells;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string where = "rows[" + std::to_string(i) + "]";
    if (!rows[i].is_object())
      return make_unexpected(core_errc::invalid_argument, where + ": expected an object of column values");
    cells.clear();
    for (const auto& [name, value] : rows[i].items()) {
      if (!uses(enc.format(), name)) continue;  // the label and other columns: not the model's business
      const auto written = texts.texts.find({i, name});
      auto text = cell_text(value, written == texts.texts.end() ? nullptr : &written->second,
                            where + " '" + name + "'");
      if (!text) return text.err();
      cells.emplace_back(name, std::move(*text));
    }
    if (auto e = enc.encode_cells(cells, r, where); !e) return e.err();
    in.dense.insert(in.dense.end(), r.dense.begin(), r.dense.end());
    for (auto id : r.sparse) in.ids.push_back(static_cast<std::int64_t>(id));
  }
  return {};
}

}  // namespace

expected<infer_input> parse_rows_request(std::string_view body, const model_shape& shape,
                                         const job::row_encoder* enc, const std::string& why) {
  if (!enc) return bad("this model takes no raw rows: " + why + "; send tensors to /infer");
  // Nesting deeper than a request needs is refused before it is built.
  if (!observe::json_depth_within(body, 4))
    return bad("the body nests deeper than {\"rows\": [{\"column\": [...]}]}");
  auto parsed = parse_body(body);
  if (!parsed) return parsed.err();
  const json& j = *parsed;
  infer_input in;
  if (j.contains("id")) {
    if (!j["id"].is_string()) return bad("'id': expected a string");
    in.id = j["id"].get<std::string>();
  }
  auto outputs = outputs_of(j, shape);
  if (!outputs) return outputs.err();
  in.outputs = *outputs;
  if (!j.contains("rows")) return bad("'rows' missing: expected an array of objects");
  if (!j["rows"].is_array())
    return bad(std::string("'rows': expected an array of objects, not ") + j["rows"].type_name() +
               (j["rows"].is_object() ? " (one row goes in brackets: [{...}])" : ""));
  const auto& rows = j["rows"];
  if (rows.empty() || rows.size() > shape.max_rows)
    return bad("'rows': " + std::to_string(rows.size()) + " rows; this server takes 1 to " +
               std::to_string(shape.max_rows) + " per request (max_batch)");
  number_texts texts;
  json::sax_parse(body, &texts);  // the body parsed once already: no error here
  if (auto e = encode_rows(rows, texts, *enc, in); !e) return e.err();
  in.rows = rows.size();
  if (!shape.takes_ids) in.ids.clear();
  return in;
}

}  // namespace troupe::serve
