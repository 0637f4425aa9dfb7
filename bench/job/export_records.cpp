// Bench-only: writes a record store (the train or test store `troupe run` prepared under the
// dataset cache) as raw little-endian arrays for the PyTorch peer of bench/job:
//   <out>.labels.f32  float32 [rows]
//   <out>.sparse.u64  uint64  [rows x fields]   global ids (field * buckets + local id)
//   <out>.dense.f32   float32 [rows x dense_dim] (only when dense_dim > 0)
//   <out>.json        {"rows", "fields", "dense_dim", "buckets_per_field"}
// Usage: export_records STORE_DIR OUT_PREFIX
#include <cstdio>
#include <fstream>
#include <string>

#include "troupe/job/data.hpp"
#include "troupe/storage/record_store.hpp"

namespace {

template <class T>
bool write_array(const std::string& path, const std::vector<T>& v) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  return static_cast<bool>(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: export_records STORE_DIR OUT_PREFIX\n");
    return 2;
  }
  auto store = troupe::storage::record_store::open(argv[1]);
  if (!store) {
    std::fprintf(stderr, "export_records: %s\n", store.err().to_string().c_str());
    return 1;
  }
  auto d = troupe::job::read_all(*store);
  if (!d) {
    std::fprintf(stderr, "export_records: %s\n", d.err().to_string().c_str());
    return 1;
  }
  std::string out = argv[2];
  bool ok = write_array(out + ".labels.f32", d->labels) && write_array(out + ".sparse.u64", d->sparse);
  if (d->info.dense_dim > 0) ok = ok && write_array(out + ".dense.f32", d->dense);
  std::ofstream meta(out + ".json", std::ios::trunc);
  meta << "{\"rows\": " << d->rows << ", \"fields\": " << d->info.sparse_fields
       << ", \"dense_dim\": " << d->info.dense_dim << ", \"buckets_per_field\": " << d->info.buckets_per_field
       << "}\n";
  if (!ok || !meta) {
    std::fprintf(stderr, "export_records: cannot write %s.*\n", out.c_str());
    return 1;
  }
  std::printf("exported %zu rows to %s.*\n", d->rows, out.c_str());
  return 0;
}
