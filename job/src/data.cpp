#include "troupe/job/data.hpp"
#include "troupe/job/dataset_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <spdlog/spdlog.h>

#include <xxhash.h>
#include <cerrno>
#include <cstring>

namespace troupe::job {

namespace fs = std::filesystem;

storage::record_schema schema_of(const nn::dataset_info& info) {
  storage::record_schema s;
  s.dense_dim = static_cast<std::uint32_t>(info.dense_dim);
  s.sparse_fields = static_cast<std::uint32_t>(info.sparse_fields);
  s.num_classes = static_cast<std::uint32_t>(info.num_classes);
  if (info.image_shape[0] > 0)
    for (auto d : info.image_shape) s.image_shape.push_back(static_cast<std::uint32_t>(d));
  s.buckets_per_field = info.buckets_per_field;
  return s;
}

nn::dataset_info info_of(const storage::manifest& m, const std::string& name) {
  nn::dataset_info info;
  info.name = name;
  info.dense_dim = m.schema.dense_dim;
  info.sparse_fields = m.schema.sparse_fields;
  info.num_classes = m.schema.num_classes == 0 ? 2 : m.schema.num_classes;
  for (std::size_t i = 0; i < m.schema.image_shape.size() && i < 3; ++i)
    info.image_shape[i] = m.schema.image_shape[i];
  info.buckets_per_field = m.schema.buckets_per_field;
  return info;
}

expected<storage::manifest> write_dataset(const nn::dataset& d, const std::string& dir,
                                          const std::string& source) {
  if (auto v = d.validate(); !v) return v.err();
  std::error_code ec;
  const bool made = !fs::exists(dir, ec);
  auto written = [&]() -> expected<storage::manifest> {
    auto w = storage::record_writer::create(dir, schema_of(d.info), source);
    if (!w) return w.err();
    storage::record r;
    for (std::size_t i = 0; i < d.rows; ++i) {
      r.label = d.labels[i];
      r.dense.assign(d.dense_row(i), d.dense_row(i) + d.info.dense_dim);
      r.sparse.assign(d.sparse_row(i), d.sparse_row(i) + d.info.sparse_fields);
      if (auto a = w->append(r); !a) return a.err();
    }
    return w->finish();
  }();
  // A half-written store (a full disk) is no store: left, it held the disk full and a second run
  // said the directory "already holds a store".
  if (!written && made) fs::remove_all(dir, ec);
  return written;
}

namespace {
void put_row(nn::dataset& out, std::size_t i, const storage::record& r) {
  out.labels[i] = r.label;
  std::copy(r.dense.begin(), r.dense.end(),
            out.dense.begin() + static_cast<std::ptrdiff_t>(i * out.info.dense_dim));
  std::copy(r.sparse.begin(), r.sparse.end(),
            out.sparse.begin() + static_cast<std::ptrdiff_t>(i * out.info.sparse_fields));
}
}  // namespace

void size_rows(const storage::manifest& m, const std::string& name, std::size_t rows, nn::dataset& out) {
  if (out.info.dense_dim != m.schema.dense_dim || out.info.sparse_fields != m.schema.sparse_fields)
    out.info = info_of(m, name);
  out.rows = rows;
  out.dense.resize(rows * m.schema.dense_dim);
  out.sparse.resize(rows * m.schema.sparse_fields);
  out.labels.resize(rows);
}

expected<void> read_records(const storage::record_store& store, std::uint64_t first, std::uint64_t n,
                            nn::dataset& out) {
  std::uint64_t end = std::min(first + n, store.count());
  std::size_t rows = first < end ? static_cast<std::size_t>(end - first) : 0;
  size_rows(store.info(), store.dir(), rows, out);
  auto visited = store.scan(first, rows, [&](std::uint64_t index, const storage::record& r) {
    put_row(out, static_cast<std::size_t>(index - first), r);
    return true;
  });
  if (!visited) return visited.err();
  if (*visited != rows)
    return error(std::error_code(storage::storage_errc::corrupt_record),
                 store.dir() + ": records " + std::to_string(first) + ".." + std::to_string(end) + ": read " +
                     std::to_string(*visited) + " of " + std::to_string(rows));
  return {};
}

expected<void> decode_rows(const storage::record_schema& s, std::uint64_t first, std::string_view bytes,
                           nn::dataset& out, std::size_t at, const std::string& where) {
  const std::size_t size = storage::encoded_size(s);
  const std::size_t n = bytes.size() / size;
  if (bytes.size() % size != 0 || at + n > out.rows)
    return error(std::error_code(storage::storage_errc::corrupt_record),
                 where + ": records from " + std::to_string(first) + ": " + std::to_string(bytes.size()) +
                     " bytes are not " + std::to_string(out.rows - std::min(at, out.rows)) + " records of " +
                     std::to_string(size) + " bytes or fewer");
  for (std::size_t k = 0; k < n; ++k)
    if (auto d = decode_row(s, first + k, bytes.substr(k * size, size), out, at + k, where); !d) return d;
  return {};
}

expected<void> decode_row(const storage::record_schema& s, std::uint64_t index, std::string_view bytes,
                          nn::dataset& out, std::size_t i, const std::string& where) {
  if (out.info.dense_dim != s.dense_dim || out.info.sparse_fields != s.sparse_fields || i >= out.rows)
    return error(std::error_code(storage::storage_errc::invalid_argument),
                 where + ": record " + std::to_string(index) + ": no row " + std::to_string(i) +
                     " sized for its schema");
  storage::record_slots row{&out.labels[i], out.dense.data() + i * out.info.dense_dim,
                            out.sparse.data() + i * out.info.sparse_fields};
  return storage::decode_record_to(s, index, bytes, row, where);
}

expected<nn::dataset> read_all(const storage::record_store& store) {
  nn::dataset d;
  d.info = info_of(store.info(), store.dir());
  if (auto r = read_records(store, 0, store.count(), d); !r) return r.err();
  return d;
}

namespace {
// A name for the data a config describes: same config, same key, same cached stores.
std::string data_key(const nn::data_config& c) {
  std::ostringstream k;
  k << c.source << '|' << c.dir << '|' << c.max_train_rows << '|' << c.max_test_rows << '|' << c.train_path
    << '|' << c.test_path << '|' << c.test_fraction << '|' << c.criteo.buckets_per_field << '|'
    << c.criteo.log_transform << '|' << c.synthetic.rows << '|' << c.synthetic.fields << '|'
    << c.synthetic.vocab_per_field << '|' << c.synthetic.zipf_exponent << '|' << c.synthetic.dense_dim << '|'
    << c.synthetic.factor_dim << '|' << c.synthetic.weight_scale << '|' << c.synthetic.factor_scale << '|'
    << c.synthetic.bias << '|' << c.synthetic.model_seed << '|' << c.synthetic.sample_seed << '|'
    << c.test_rows;
  std::string text = k.str();
  return cache_entry_name(c.source, XXH64(text.data(), text.size(), 0));
}

// A complete store whose every record reads back; a corrupt one is reported (it is rebuilt).
bool store_ok(const std::string& dir) {
  if (!storage::record_store::open(dir)) return false;
  auto v = verify_store_once(dir);
  if (!v) spdlog::warn("dataset cache: {}: rebuilding it", v.err().to_string());
  return static_cast<bool>(v);
}

// [data] source = "store": the user's own stores, verified, never rewritten.
expected<prepared_data> named_stores(const nn::data_config& c) {
  prepared_data p;
  p.train_dir = c.train_path;
  p.test_dir = c.test_path;
  p.key = "store";
  p.reused = true;
  for (const auto& [key, dir] : {std::pair{"train", c.train_path}, std::pair{"test", c.test_path}})
    if (auto v = verify_store(dir); !v)
      return std::move(v).err().wrap(std::string("key 'data.")
                                         .append(key)
                                         .append("': re-import the store (troupe data import ... --out ")
                                         .append(dir)
                                         .append(")"));
  return p;
}
}  // namespace

namespace {
// The data `c` describes, imported afresh into p's stores under `base` (the key's lock held).
expected<void> import_into(const nn::data_config& c, prepared_data& p, const fs::path& base) {
  std::error_code ec;
  // A half-written import (killed importer) is discarded and redone.
  fs::remove_all(p.train_dir, ec);
  fs::remove_all(p.test_dir, ec);
  spdlog::info("preparing dataset {} in {}", c.source, base.string());
  auto data = nn::load_data(c);
  if (!data) return data.err();
  // A write that fails (a full disk) takes its half-written stores away: they held the disk full,
  // so that nothing else of the job (result.json, its log) could be written either.
  auto discard = [&](const error& e) {
    fs::remove_all(p.train_dir, ec);
    fs::remove_all(p.test_dir, ec);
    return make_unexpected(e);
  };
  if (auto w = write_dataset(data->train, p.train_dir, c.source + ":train"); !w) return discard(w.err());
  if (auto w = write_dataset(data->test, p.test_dir, c.source + ":test"); !w) return discard(w.err());
  p.true_auc = data->true_auc;
  std::ofstream(base / "true_auc") << std::setprecision(17) << p.true_auc << "\n";
  return {};
}
}  // namespace

expected<prepared_data> prepare_datasets(const nn::data_config& c, const std::string& cache) {
  if (c.source == "store") return named_stores(c);
  prepared_data p;
  p.key = data_key(c);
  fs::path base = fs::path(cache) / p.key;
  p.train_dir = (base / "train").string();
  p.test_dir = (base / "test").string();
  auto pin = cache_pin::take(base.string());  // before the preparation: a prune never takes it from under us
  if (!pin) return pin.err();
  p.pin = std::move(*pin);
  // One preparer per key at a time, across processes.
  int lock = ::open((base / "lock").c_str(), O_CREAT | O_RDWR, 0644);
  if (lock < 0)
    return make_unexpected(core_errc::io_error,
                           (base / "lock").string() + ": cannot open: " + std::strerror(errno));
  // Another job (or `troupe data`) preparing the same dataset: said, then waited for (the runner
  // printed nothing for as long as the other import took).
  if (::flock(lock, LOCK_EX | LOCK_NB) != 0) {
    spdlog::warn("dataset {} is being prepared by another process (it holds {}): waiting for it", c.source,
                 (base / "lock").string());
    ::flock(lock, LOCK_EX);
    spdlog::info("dataset {}: the other preparer is done", c.source);
  }
  struct unlock_guard {
    int fd;
    ~unlock_guard() { ::close(fd); }
  } guard{lock};
  auto auc_file = base / "true_auc";
  if (store_ok(p.train_dir) && store_ok(p.test_dir)) {
    p.reused = true;
    std::ifstream(auc_file) >> p.true_auc;
    return p;
  }
  if (auto i = import_into(c, p, base); !i) return i.err();
  return p;
}

}  // namespace troupe::job
