// Storage benchmarks, JSON lines on stdout:
//  - sequential scan of the Fashion-MNIST train store (decode + checksum of every record) vs a
//    plain read() of the same encoded bytes from a file, both from the page cache, same run;
//  - checkpoint write MB/s (full and incremental, from a flat_state as a PS shard hands it over,
//    and from maps) vs writing the same bytes (the data file's size) to a plain file with one
//    fsync, alternately in the same run.
// Usage: storage_bench [WORK_DIR] [--repeat N] [--checkpoints (only)]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "troupe/nn/data/readers.hpp"
#include "troupe/storage/checkpoint_store.hpp"
#include "troupe/storage/record_store.hpp"

using namespace troupe;
using namespace troupe::storage;
namespace fs = std::filesystem;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void die(const troupe::error& e) {
  std::fprintf(stderr, "storage_bench: %s\n", e.to_string().c_str());
  std::exit(1);
}

// Imports Fashion-MNIST train and writes the same encoded records to a flat file.
void build(const std::string& store, const std::string& flat) {
  auto d = nn::read_fashion_mnist(nn::fashion_mnist_default_dir, "train");
  if (!d) die(d.err());
  record_schema s{784, 0, 10, {1, 28, 28}, 0};
  writer_options o;
  o.no_sync = true;  // scratch data
  auto w = record_writer::create(store, s, "fashion-mnist:train", o);
  if (!w) die(w.err());
  std::string bytes(encoded_size(s) * d->rows, '\0');
  record r;
  for (std::size_t i = 0; i < d->rows; ++i) {
    r.label = d->labels[i];
    r.dense.assign(d->dense_row(i), d->dense_row(i) + 784);
    if (auto a = w->append(r); !a) die(a.err());
    encode_record(s, i, r, bytes.data() + i * encoded_size(s));
  }
  if (auto m = w->finish(); !m) die(m.err());
  FILE* f = std::fopen(flat.c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

double scan_store(const record_store& s, double& checksum) {
  double t0 = now_s();
  auto n = s.scan(0, s.count(), [&](std::uint64_t, const record& r) {
    checksum += r.dense[400] + r.label;
    return true;
  });
  if (!n) die(n.err());
  return now_s() - t0;
}

double read_flat(const std::string& path, std::size_t& bytes) {
  double t0 = now_s();
  int fd = ::open(path.c_str(), O_RDONLY);
  std::vector<char> buf(1 << 20);
  bytes = 0;
  for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) bytes += static_cast<std::size_t>(n);
  ::close(fd);
  return now_s() - t0;
}

void bench_scan(const std::string& work, int repeat) {
  std::string store = work + "/fmnist", flat = work + "/fmnist.bin";
  if (!fs::exists(store + "/data.mdb")) build(store, flat);
  auto s = record_store::open(store);
  if (!s) die(s.err());
  const double mb = static_cast<double>(s->count() * encoded_size(s->info().schema)) / 1e6;
  std::vector<double> ts, tf;
  double sum = 0;
  std::size_t bytes = 0;
  for (int i = 0; i < repeat + 1; ++i) {  // the first round warms the page cache
    double a = scan_store(*s, sum), b = read_flat(flat, bytes);
    if (i > 0) ts.push_back(a), tf.push_back(b);
  }
  std::sort(ts.begin(), ts.end());
  std::sort(tf.begin(), tf.end());
  double t = ts[ts.size() / 2], f = tf[tf.size() / 2];
  std::printf(
      "{\"bench\":\"record_scan\",\"dataset\":\"fashion-mnist-train\",\"records\":%llu,\"mb\":%.1f,"
      "\"median_s\":%.4f,\"records_per_s\":%.0f,\"mb_per_s\":%.0f,\"peer\":\"plain_file_read\",\"peer_s\":%."
      "4f,"
      "\"peer_mb_per_s\":%.0f,\"ratio\":%.3f,\"repeat\":%d,\"sink\":%g}\n",
      static_cast<unsigned long long>(s->count()), mb, t, s->count() / t, mb / t, f, bytes / 1e6 / f, t / f,
      repeat, sum);
}

shard_state make_state(std::size_t dense, std::size_t rows, std::size_t dim, std::uint64_t salt) {
  shard_state st;
  if (dense > 0) {
    st.dense["w"].assign(dense, 0.5f);
    st.dense_slots["adam.m/w"].assign(dense, 0.25f);
  }
  auto& t = st.embeddings["emb"];
  auto& g = st.embedding_slots["adagrad/emb"];
  for (std::size_t r = 0; r < rows; ++r) {
    std::uint64_t id = (r * 2654435761u + salt) % (rows * 8);
    t[id].assign(dim, 0.1f * static_cast<float>(r % 7));
    g[id].assign(dim, 0.01f);
  }
  return st;
}

std::size_t payload(const shard_state& s) {
  std::size_t n = 0;
  for (auto& [k, v] : s.dense) n += 4 * v.size();
  for (auto& [k, v] : s.dense_slots) n += 4 * v.size();
  for (auto& [k, t] : s.embeddings) n += t.size() * 4 * (t.empty() ? 0 : t.begin()->second.size());
  for (auto& [k, t] : s.embedding_slots) n += t.size() * 4 * (t.empty() ? 0 : t.begin()->second.size());
  return n;
}

double write_flat(const std::string& path, std::size_t bytes) {
  std::vector<char> buf(bytes, 'x');
  double t0 = now_s();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (std::size_t off = 0; off < bytes;)
    off += static_cast<std::size_t>(::write(fd, buf.data() + off, bytes - off));
  ::fsync(fd);
  ::close(fd);
  return now_s() - t0;
}

// The same state laid out flat (what a PS shard's snapshot hands to write()).
flat_state flatten(const shard_state& s) {
  flat_state f;
  for (auto& [k, v] : s.dense) f.dense.emplace_back(k, v);
  for (auto& [k, v] : s.dense_slots) f.dense_slots.emplace_back(k, v);
  for (auto [from, to] :
       {std::pair{&s.embeddings, &f.embeddings}, std::pair{&s.embedding_slots, &f.embedding_slots}})
    for (auto& [k, t] : *from) {
      flat_rows r;
      r.name = k;
      r.width = t.empty() ? 0 : t.begin()->second.size();
      for (auto& [id, row] : t) {
        r.ids.push_back(id);
        r.values.insert(r.values.end(), row.begin(), row.end());
      }
      to->push_back(std::move(r));
    }
  return f;
}

std::size_t file_bytes(const std::string& dir, std::uint64_t version) {
  char name[32];
  std::snprintf(name, sizeof name, "/v%020llu.ckpt", static_cast<unsigned long long>(version));
  return static_cast<std::size_t>(fs::file_size(dir + name));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench_checkpoint(const std::string& work, int repeat) {
  fs::remove_all(work + "/ckpt");
  checkpoint_options o;
  o.keep_full = 0;  // collection is measured on its own below
  auto store = checkpoint_store::open(work + "/ckpt", o);
  if (!store) die(store.err());
  auto full = make_state(4 << 20, 200000, 16, 1);  // 16 MB dense + slot, 200k rows x 16 + slot
  auto incr = make_state(0, 20000, 16, 7);         // changed rows only
  const auto full_flat = flatten(full), incr_flat = flatten(incr);
  for (auto [name, st, flat, kind] :
       {std::tuple{"full", &full, &full_flat, checkpoint_kind::full},
        std::tuple{"incremental", &incr, &incr_flat, checkpoint_kind::incremental}}) {
    for (bool from_maps : {false, true}) {
      std::vector<double> ts, fs_;
      std::size_t bytes = 0;
      for (int i = 0; i < repeat; ++i) {
        if (kind == checkpoint_kind::incremental || i > 0)
          (void)store->write(full_flat, checkpoint_kind::full);
        double t0 = now_s();
        auto v = from_maps ? store->write(*st, kind) : store->write(*flat, kind);
        if (!v) die(v.err());
        ts.push_back(now_s() - t0);
        bytes = file_bytes(work + "/ckpt", *v);
        fs_.push_back(write_flat(work + "/ckpt.flat", bytes));
      }
      double t = median(ts), f = median(fs_);
      double mb = static_cast<double>(bytes) / 1e6;
      std::printf(
          "{\"bench\":\"checkpoint_write\",\"kind\":\"%s\",\"from\":\"%s\",\"mb\":%.1f,\"payload_mb\":%.1f,"
          "\"median_s\":%.4f,\"mb_per_s\":%.0f,\"peer\":\"plain_file_write_fsync\",\"peer_s\":%.4f,"
          "\"peer_mb_per_s\":%.0f,\"ratio\":%.3f,\"repeat\":%d}\n",
          name, from_maps ? "maps" : "flat", mb, static_cast<double>(payload(*st)) / 1e6, t, mb / t, f,
          mb / f, f / t, repeat);
      std::fflush(stdout);
    }
  }
  auto before = store->list();
  double c0 = now_s();
  auto removed = store->collect(1);
  if (!removed) die(removed.err());
  double ct = now_s() - c0;
  std::printf(
      "{\"bench\":\"checkpoint_collect\",\"versions_removed\":%llu,\"versions_before\":%zu,\"s\":%.4f}\n",
      static_cast<unsigned long long>(*removed), before ? before->size() : 0, ct);
  std::vector<double> ts;
  double mb = 0;
  for (int i = 0; i < repeat; ++i) {
    double t0 = now_s();
    auto st = store->load_latest();
    if (!st) die(st.err());
    ts.push_back(now_s() - t0);
    mb = static_cast<double>(payload(*st)) / 1e6;
  }
  double t = median(ts);
  std::printf(
      "{\"bench\":\"checkpoint_load\",\"mb\":%.1f,\"median_s\":%.4f,\"mb_per_s\":%.0f,\"repeat\":%d}\n", mb,
      t, mb / t, repeat);
}

}  // namespace

int main(int argc, char** argv) {
  std::string work = fs::temp_directory_path() / "troupe_storage_bench";
  int repeat = 5;
  bool checkpoints_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--checkpoints")
      checkpoints_only = true;
    else
      work = a;
  }
  fs::create_directories(work);
  if (!checkpoints_only) bench_scan(work, repeat);
  bench_checkpoint(work, repeat);
  return 0;
}
