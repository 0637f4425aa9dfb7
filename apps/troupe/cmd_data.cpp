// `troupe data ...`: builds record stores (storage/record_store.hpp) from the nn readers and
// shows what a store holds.
//   troupe data import fashion-mnist --out DIR [--split train|t10k] [--from DIR] [--max-rows N]
//   troupe data import criteo FILE --out DIR [--buckets N] [--max-rows N]
//   troupe data import csv FILE --out DIR --label COL [--dense COLS] [--sparse COLS] ... (data_csv.hpp)
//   troupe data synth-ctr --rows N --fields F --vocab V --seed S --out DIR [--dense D]
//   troupe data inspect DIR [--records K] [--verify]
//   troupe data cache [prune [--older-than AGE] [--dry-run]] [--root R | --cache DIR] (data_cache.hpp)
// Exit codes as in command.hpp; a missing or malformed input file fails with exit 1 and one line
// naming the file (and the record or line).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "command.hpp"
#include "data_cache.hpp"
#include "data_csv.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/job/data.hpp"
#include "troupe/nn/data/readers.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::cli {
namespace {

struct import_flags {
  std::string out, split = "train", from = nn::fashion_mnist_default_dir, file;
  std::size_t max_rows = 0;
  std::uint64_t buckets = 1u << 20;
};

struct synth_flags {
  std::string out;
  std::size_t rows = 100000, fields = 8, dense = 0;
  std::uint64_t vocab = 1000, seed = 1;
};

struct inspect_flags {
  std::string dir;
  std::size_t records = 3;
  bool verify = false;
};

// Writes every row of `d` to a new store in `out`; prints a one-line summary.
int write_store(const nn::dataset& d, const std::string& out, const std::string& source) {
  auto start = clock::system().now();  // real time, for the summary
  auto m = job::write_dataset(d, out, source);
  if (!m) return run_error(m.err());
  double secs = std::chrono::duration<double>(clock::system().now() - start).count();
  double mb = static_cast<double>(m->record_count * storage::encoded_size(m->schema)) / 1e6;
  std::printf("%s: %llu records (%.1f MB) from %s in %.2f s\n", out.c_str(),
              static_cast<unsigned long long>(m->record_count), mb, source.c_str(), secs);
  return 0;
}

int import_fashion_mnist(const import_flags& f) {
  auto d = nn::read_fashion_mnist(f.from, f.split, f.max_rows);
  if (!d) return run_error(d.err());
  return write_store(*d, f.out, "fashion-mnist:" + f.split);
}

int import_criteo(const import_flags& f) {
  if (!std::filesystem::exists(f.file))
    return run_error(error(core_errc::io_error, f.file + ": no such file"));
  nn::criteo_options o;
  o.buckets_per_field = f.buckets;
  o.max_rows = f.max_rows;
  auto d = nn::read_criteo_tsv(f.file, o);
  if (!d) return run_error(d.err());
  if (d->rows == 0) return run_error(error(core_errc::parse_error, f.file + ": no records"));
  return write_store(*d, f.out, "criteo:" + f.file);
}

int synth_ctr(const synth_flags& f) {
  nn::synthetic_ctr_options o;
  o.rows = f.rows;
  o.fields = f.fields;
  o.vocab_per_field = f.vocab;
  o.dense_dim = f.dense;
  o.sample_seed = f.seed;
  auto s = nn::generate_synthetic_ctr(o);
  if (!s) return run_error(s.err());
  std::printf("planted model: auc %.4f, logloss %.4f, positive rate %.4f\n", s->true_auc, s->true_logloss,
              s->positive_rate);
  return write_store(s->data, f.out,
                     "synth-ctr:rows=" + std::to_string(f.rows) + ",fields=" + std::to_string(f.fields) +
                         ",vocab=" + std::to_string(f.vocab) + ",seed=" + std::to_string(f.seed));
}

void print_record(std::uint64_t i, const storage::record& r) {
  std::printf("record %llu: label %g", static_cast<unsigned long long>(i), r.label);
  if (!r.dense.empty()) {
    std::printf(" dense [");
    for (std::size_t k = 0; k < r.dense.size() && k < 8; ++k) std::printf("%s%g", k ? ", " : "", r.dense[k]);
    std::printf("%s]", r.dense.size() > 8 ? ", ..." : "");
  }
  if (!r.sparse.empty()) {
    std::printf(" sparse [");
    for (std::size_t k = 0; k < r.sparse.size() && k < 8; ++k)
      std::printf("%s%llu", k ? ", " : "", static_cast<unsigned long long>(r.sparse[k]));
    std::printf("%s]", r.sparse.size() > 8 ? ", ..." : "");
  }
  std::printf("\n");
}

int inspect(const inspect_flags& f) {
  auto s = storage::record_store::open_read_only(f.dir);
  if (!s) return run_error(s.err());
  std::printf("# %s\n%s\n", f.dir.c_str(), s->info().to_toml().c_str());
  std::printf("records: %llu (%zu bytes each)\n", static_cast<unsigned long long>(s->count()),
              storage::encoded_size(s->info().schema));
  auto shown = s->scan(0, f.records, [](std::uint64_t i, const storage::record& r) {
    print_record(i, r);
    return true;
  });
  if (!shown) return run_error(shown.err());
  if (f.verify) {
    auto n = s->scan(0, s->count(), [](std::uint64_t, const storage::record&) { return true; });
    if (!n) return run_error(n.err());
    std::printf("verified: %llu records, all checksums match\n", static_cast<unsigned long long>(*n));
  }
  return 0;
}

CLI::App* add_import(CLI::App& data, std::shared_ptr<import_flags> f,
                     std::shared_ptr<int (*)(const import_flags&)> which) {
  auto* imp = data.add_subcommand("import", "Import a dataset into a new record store");
  imp->require_subcommand(1);
  auto* fm = imp->add_subcommand("fashion-mnist", "Fashion-MNIST from the Debian dataset package");
  fm->add_option("--out", f->out, "store directory (must not hold a store)")->required();
  fm->add_option("--split", f->split, "train (60000) or t10k (10000)")
      ->check(CLI::IsMember({"train", "t10k"}));
  fm->add_option("--from", f->from, "directory of the IDX files");
  fm->add_option("--max-rows", f->max_rows, "keep only the first N examples (0: all)");
  fm->callback([which] { *which = import_fashion_mnist; });
  auto* cr = imp->add_subcommand("criteo", "Criteo TSV (label, 13 integers, 26 categoricals; .gz accepted)");
  cr->add_option("file", f->file, "TSV file")->required();
  cr->add_option("--out", f->out, "store directory (must not hold a store)")->required();
  cr->add_option("--buckets", f->buckets, "ids per categorical field")->check(CLI::Range(2ull, 1ull << 40));
  cr->add_option("--max-rows", f->max_rows, "keep only the first N lines (0: all)");
  cr->callback([which] { *which = import_criteo; });
  return imp;
}

const command_registrar reg{
    "data", "Build record stores (import, synth-ctr), inspect them, and list or prune the dataset cache",
    [](CLI::App& sub) -> runner {
      auto imp = std::make_shared<import_flags>();
      auto which = std::make_shared<int (*)(const import_flags&)>(nullptr);
      auto syn = std::make_shared<synth_flags>();
      auto ins = std::make_shared<inspect_flags>();
      auto mode = std::make_shared<int>(0);
      sub.require_subcommand(1);
      auto csv = add_import_csv(*add_import(sub, imp, which), mode, 3);
      auto cache = add_data_cache(sub, mode, 4);
      auto* sc = sub.add_subcommand("synth-ctr", "Synthetic CTR data drawn from a planted FM model");
      sc->add_option("--rows", syn->rows, "rows")
          ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 32))
          ->capture_default_str();
      sc->add_option("--fields", syn->fields, "categorical fields")
          ->check(CLI::Range(1, 1024))
          ->capture_default_str();
      sc->add_option("--vocab", syn->vocab, "ids per field")
          ->check(CLI::Range(2ull, 1ull << 40))
          ->capture_default_str();
      sc->add_option("--seed", syn->seed, "sample seed (the planted model is fixed)")->capture_default_str();
      sc->add_option("--dense", syn->dense, "extra dense features")
          ->check(CLI::Range(0, 4096))
          ->capture_default_str();
      sc->add_option("--out", syn->out, "store directory (must not hold a store)")->required();
      sc->callback([mode] { *mode = 1; });
      auto* in = sub.add_subcommand("inspect", "Print a store's manifest, count and first records");
      in->add_option("dir", ins->dir, "store directory")->required();
      in->add_option("--records", ins->records, "records to print");
      in->add_flag("--verify", ins->verify, "read every record and check its checksum");
      in->callback([mode] { *mode = 2; });
      return [=]() -> int {
        if (*mode == 1) return synth_ctr(*syn);
        if (*mode == 2) return inspect(*ins);
        if (*mode == 3) return csv();
        if (*mode == 4) return cache();
        if (*which) return (*which)(*imp);
        return usage_error("data: no subcommand given");
      };
    }};

}  // namespace
}  // namespace troupe::cli
