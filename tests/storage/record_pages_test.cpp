// A record store whose data file is damaged under it never aborts or crashes the reader: every
// read checks the LMDB pages it touches first (storage/src/page_check.hpp). Each damaged store is
// read in a child process, so that a crash (what LMDB does with a bad page header) is seen as the
// child's signal instead of taking the test down.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "test_dir.hpp"
#include "troupe/storage/lmdb.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::storage {
namespace {

namespace fs = std::filesystem;
using testing::temp_dir;

constexpr std::size_t page = 4096;

// `n` records of `dense` floats: 2 KiB or more go to LMDB overflow pages, small ones fill leaves.
void import(const std::string& dir, std::uint64_t n, std::uint32_t dense) {
  auto w = record_writer::create(dir, {dense, 2, 10, {}}, "pages-test");
  ASSERT_TRUE(w) << w.err().to_string();
  record r;
  for (std::uint64_t i = 0; i < n; ++i) {
    r.label = static_cast<float>(i % 10);
    r.dense.assign(dense, static_cast<float>(i));
    r.sparse = {i, i * 3};
    ASSERT_TRUE(w->append(r));
  }
  ASSERT_TRUE(w->finish());
}

struct outcome {
  bool crashed = false;  // killed by a signal (LMDB's abort, a stray read)
  int signal = 0;
  bool read_all = false;  // every record read and verified
  std::string error;      // else: what the reader was told
};

// Opens `dir` and reads every record (a scan, then each record by index) in a child process.
outcome read_in_child(const std::string& dir) {
  int p[2];
  if (::pipe(p) != 0) return {};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    std::string problem;
    auto s = record_store::open(dir);
    if (!s) {
      problem = s.err().to_string();
    } else {
      auto n = s->scan(0, s->count(), [](std::uint64_t, const record&) { return true; });
      if (!n) problem = n.err().to_string();
      for (std::uint64_t i = 0; problem.empty() && i < s->count(); i += 7)
        if (auto r = s->read(i); !r) problem = r.err().to_string();
    }
    if (!problem.empty()) (void)!::write(p[1], problem.data(), problem.size());
    ::_exit(problem.empty() ? 0 : 1);
  }
  ::close(p[1]);
  outcome o;
  char buf[512];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) o.error.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  o.crashed = WIFSIGNALED(status);
  o.signal = o.crashed ? WTERMSIG(status) : 0;
  o.read_all = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return o;
}

void overwrite(const fs::path& file, std::size_t at, const std::string& bytes) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string copy_store(const std::string& from, const std::string& to) {
  fs::create_directories(to);
  fs::copy_file(from + "/data.mdb", to + "/data.mdb", fs::copy_options::overwrite_existing);
  return to;
}

// What the test of the job harness does (tests/common/disk_faults.hpp): the middle of the file
// overwritten with 0xa5 pages. Before the page checks this made LMDB fail an assertion (SIGABRT).
TEST(RecordPages, MiddlePagesOverwrittenAreAnErrorNamingTheFileNotACrash) {
  for (std::uint32_t dense : {3u, 700u}) {  // records in leaves; records on overflow pages
    temp_dir d;
    import(d.str(), dense == 3 ? 20000 : 600, dense);
    const auto file = d.sub("data.mdb");
    const auto size = fs::file_size(file);
    for (auto at = size * 3 / 10 / page * page; at < size * 7 / 10; at += page)
      overwrite(file, at, std::string(page, '\xa5'));
    auto o = read_in_child(d.str());
    EXPECT_FALSE(o.crashed) << "dense " << dense << ": killed by signal " << o.signal;
    EXPECT_FALSE(o.read_all) << "dense " << dense;
    EXPECT_NE(o.error.find(file), std::string::npos) << o.error;
    EXPECT_NE(o.error.find("page"), std::string::npos) << o.error;
  }
}

TEST(RecordPages, AZeroedBranchOrLeafPageIsAnError) {
  temp_dir d;
  import(d.str(), 20000, 3);
  const auto file = d.sub("data.mdb");
  auto o = read_in_child(d.str());
  ASSERT_TRUE(o.read_all) << o.error;
  // Zero each tree page in turn (pages 2.. up to the end): never a crash.
  const auto pages = fs::file_size(file) / page;
  for (std::size_t pg = 2; pg < pages; pg += std::max<std::size_t>(1, pages / 40)) {
    const auto c = copy_store(d.str(), d.sub("zero-").append(std::to_string(pg)));
    overwrite(fs::path(c) / "data.mdb", pg * page, std::string(page, '\0'));
    auto z = read_in_child(c);
    EXPECT_FALSE(z.crashed) << "page " << pg << " zeroed: killed by signal " << z.signal;
    if (!z.read_all) {
      EXPECT_NE(z.error.find(c), std::string::npos) << z.error;
    }
  }
}

// Random damage: a page header, a node offset, a byte anywhere, a whole page of noise, in stores
// with small and with overflow records. Whatever it hits, the reader gets a value or an error.
TEST(RecordPages, RandomDamageNeverCrashesTheReader) {
  std::mt19937_64 rng(20261126);
  for (std::uint32_t dense : {3u, 700u}) {
    temp_dir d;
    import(d.str(), dense == 3 ? 6000 : 300, dense);
    const auto pages = fs::file_size(d.sub("data.mdb")) / page;
    int errors = 0;
    for (int trial = 0; trial < 60; ++trial) {
      const auto c = copy_store(d.str(), d.sub("trial-").append(std::to_string(trial)));
      const auto file = fs::path(c) / "data.mdb";
      const std::size_t pg = 2 + rng() % (pages - 2);
      std::string noise(page, '\0');
      for (auto& ch : noise) ch = static_cast<char>(rng());
      switch (trial % 4) {
        case 0:
          overwrite(file, pg * page, noise.substr(0, 16));
          break;  // header
        case 1:
          overwrite(file, pg * page + 16 + rng() % 32, noise.substr(0, 2));
          break;  // offsets
        case 2:
          overwrite(file, pg * page + rng() % page, noise.substr(0, 1));
          break;  // a byte
        default:
          overwrite(file, pg * page, noise);
          break;  // the page
      }
      auto o = read_in_child(c);
      ASSERT_FALSE(o.crashed) << "dense " << dense << ", trial " << trial << ", page " << pg
                              << ": killed by signal " << o.signal;
      if (!o.read_all) {
        ++errors;
        EXPECT_NE(o.error.find(c), std::string::npos) << o.error;
      }
    }
    EXPECT_GT(errors, 0) << "the damage was never noticed";
  }
}

// Resident pages of `file` in this process, summed over every mapping of it (/proc/self/smaps).
std::size_t mapped_resident_kb(const std::string& file) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool ours = false;
  std::size_t kb = 0;
  while (std::getline(smaps, line)) {
    // A mapping's first line starts "start-end " in hex; its fields ("Rss:   4 kB") follow.
    const auto token = line.substr(0, line.find(' '));
    const bool header = token.find('-') != std::string::npos &&
                        token.find_first_not_of("0123456789abcdef-") == std::string::npos;
    if (header)
      ours = line.size() >= file.size() && line.compare(line.size() - file.size(), file.size(), file) == 0;
    else if (ours && line.rfind("Rss:", 0) == 0)
      kb += std::stoul(line.substr(4));
  }
  return kb;
}

// The checker reads LMDB's own mapping of the file, not a second one: each page read is mapped
// once. (With a second mapping every page read was resident twice, faulted twice, and unmapped
// twice when the process exited: a killed worker's teardown took that much longer.)
TEST(RecordPages, EachPageReadIsMappedOnce) {
  temp_dir d;
  import(d.str(), 1500, 700);  // one overflow page a record: ~6 MB
  const auto file = fs::canonical(d.sub("data.mdb")).string();
  const auto file_kb = fs::file_size(file) / 1024;
  auto s = record_store::open(d.str());
  ASSERT_TRUE(s) << s.err().to_string();
  auto n = s->scan(0, s->count(), [](std::uint64_t, const record&) { return true; });
  ASSERT_TRUE(n) << n.err().to_string();
  ASSERT_EQ(*n, 1500u);
  const auto kb = mapped_resident_kb(file);
  // Every page is resident in LMDB's mapping; the checker's own mapping holds only what it read
  // while the store opened (meta pages, the main and meta databases, and the pages around them).
  EXPECT_GE(kb, file_kb * 9 / 10);
  EXPECT_LE(kb, file_kb + 256) << "data.mdb resident " << kb << " kB for a " << file_kb << " kB file";
}

// Another process grows the file past this process's map while the store is open: LMDB remaps
// on the next read transaction, and the checker stops reading the old mapping (it would read
// unmapped memory). The reader gets records or an error, never a signal.
TEST(RecordPages, ARemapByLmdbNeverCrashesTheChecker) {
  temp_dir d;
  import(d.str(), 300, 700);
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  pid_t reader = ::fork();
  if (reader == 0) {
    pid_t writer = ::fork();  // forked before this process opens the store: no LMDB state shared
    if (writer == 0) {
      char c;
      if (::read(go[0], &c, 1) != 1) ::_exit(3);
      auto env = lmdb_env::open(d.str());
      if (!env) ::_exit(4);
      auto db = (*env)->open_db("scratch", MDB_CREATE);
      if (!db) ::_exit(5);
      const std::string blob(std::size_t{1} << 20, 'x');
      for (int i = 0; i < 80; ++i)  // 80 MB: past the reader's 64 MB map
        if (!(*env)->write([&](write_txn& w) { return w.put(*db, std::to_string(i), blob); })) ::_exit(6);
      ::_exit(0);
    }
    auto s = record_store::open(d.str());
    if (!s) ::_exit(7);
    auto first = s->scan(0, s->count(), [](std::uint64_t, const record&) { return true; });
    if (!first || *first != 300) ::_exit(8);
    (void)!::write(go[1], "g", 1);
    int st = 0;
    ::waitpid(writer, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ::_exit(9);
    for (std::uint64_t i = 0; i < s->count(); i += 13) (void)s->read(i);  // records or errors
    (void)s->scan(0, s->count(), [](std::uint64_t, const record&) { return true; });
    ::_exit(0);
  }
  ::close(go[0]);
  ::close(go[1]);
  int status = 0;
  ::waitpid(reader, &status, 0);
  ASSERT_FALSE(WIFSIGNALED(status)) << "the reader was killed by signal " << WTERMSIG(status);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "exit " << WEXITSTATUS(status);
}

}  // namespace
}  // namespace troupe::storage
