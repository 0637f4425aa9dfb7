#include <sstream>

#include "manifest_toml.hpp"
#include "troupe/core/config.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::storage {

namespace {
constexpr std::int64_t max_dim = std::int64_t{1} << 24;
}  // namespace

std::string manifest::to_toml() const {
  std::ostringstream o;
  o << "format_version = " << format_version << "\n"
    << "source = " << toml_string(source) << "\n"
    << "record_count = " << record_count << "\n"
    << "complete = " << (complete ? "true" : "false") << "\n\n"
    << "[schema]\n"
    << "dense_dim = " << schema.dense_dim << "\n"
    << "sparse_fields = " << schema.sparse_fields << "\n"
    << "num_classes = " << schema.num_classes << "\n"
    << "buckets_per_field = " << schema.buckets_per_field << "\n"
    << "image_shape = [";
  for (std::size_t i = 0; i < schema.image_shape.size(); ++i) o << (i ? ", " : "") << schema.image_shape[i];
  o << "]\n";
  if (columns) write_columns(o, *columns);
  return o.str();
}

expected<manifest> manifest::parse(std::string_view text, const std::string& where) {
  // The reader's words already name the file (and line): said once ("<where>: config: wrong type:
  // <where>:2: key ..." named it twice).
  auto bad = [&](const error& e) {
    const auto why = e.describe();
    return error(storage_errc::bad_manifest, why.rfind(where, 0) == 0 ? why : where + ": " + why);
  };
  auto doc = config_doc::from_string(text, where);
  if (!doc) return bad(doc.err());
  config_reader rd(*doc);
  auto root = rd.root();
  manifest m;
  m.format_version = static_cast<std::uint32_t>(root.require_int("format_version", 0, 1 << 30));
  if (m.format_version != record_format_version && root.has("format_version"))
    return make_unexpected(storage_errc::version_mismatch,
                           where + ": format_version " + std::to_string(m.format_version) +
                               ", this build reads " + std::to_string(record_format_version));
  m.source = root.get_string("source", "");
  m.record_count = static_cast<std::uint64_t>(root.require_int("record_count", 0));
  m.complete = root.get_bool("complete", false);
  auto s = root.section("schema");
  m.schema.dense_dim = static_cast<std::uint32_t>(s.require_int("dense_dim", 0, max_dim));
  m.schema.sparse_fields = static_cast<std::uint32_t>(s.require_int("sparse_fields", 0, max_dim));
  m.schema.num_classes = static_cast<std::uint32_t>(s.get_int("num_classes", 0, 0, max_dim));
  m.schema.buckets_per_field = static_cast<std::uint64_t>(s.get_int("buckets_per_field", 0, 0));
  std::int64_t volume = 1;
  for (auto d : s.get_ints("image_shape", {})) {
    if (d <= 0 || d > max_dim)
      s.fail("image_shape", core_errc::out_of_range, "dimensions must be in 1..2^24");
    m.schema.image_shape.push_back(static_cast<std::uint32_t>(d));
    volume *= std::max<std::int64_t>(d, 1);
  }
  if (!m.schema.image_shape.empty() && volume != m.schema.dense_dim)
    s.fail("image_shape", core_errc::out_of_range, "product of image_shape must equal dense_dim");
  if (root.has("columns")) m.columns = read_columns(root.section("columns"), m.schema.buckets_per_field);
  if (auto r = rd.finish(); !r) return bad(r.err());
  return m;
}

}  // namespace troupe::storage
