// nn::check_zip_archive on archives Python's zipfile writes (stored, deflated, ZIP64): intact ones
// pass; a flipped byte in an entry's data, a file cut short and no archive at all are refused,
// naming the file and the entry (libtorch loaded a model.pt with a flipped tensor byte silently).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "run_command.hpp"
#include "troupe/nn/zip_check.hpp"

namespace troupe::nn {
namespace {

namespace fs = std::filesystem;

// An archive of two entries, "archive/data.pkl" and "archive/data/0" (4,096 bytes), written by
// zipfile with `compression` (ZIP_STORED or ZIP_DEFLATED) and, with `zip64`, ZIP64 records; the
// offset of entry "archive/data/0"'s data in the file is printed.
std::string make_zip(const std::string& path, const std::string& compression, bool zip64,
                     std::uint64_t& data_at) {
  const std::string py =
      "import zipfile, sys\n"
      "with zipfile.ZipFile(sys.argv[1], 'w', zipfile." +
      compression +
      ") as z:\n"
      "    z.writestr('archive/data.pkl', b'pickle' * 50)\n"
      "    with z.open('archive/data/0', 'w', force_zip64=" +
      (zip64 ? std::string("True") : std::string("False")) +
      ") as f:\n"
      "        f.write(bytes(range(256)) * 16)\n"
      "with zipfile.ZipFile(sys.argv[1]) as z:\n"
      "    i = z.getinfo('archive/data/0')\n"
      "raw = open(sys.argv[1], 'rb').read()\n"
      "h = i.header_offset\n"
      "print(h + 30 + int.from_bytes(raw[h+26:h+28], 'little') + int.from_bytes(raw[h+28:h+30], 'little'))\n";
  std::ofstream(path + ".py") << py;
  auto r = test_util::run_command("python3 " + path + ".py " + path, test_util::stderr_mode::separate);
  data_at = r.code == 0 ? std::stoull(r.out) : 0;
  return r.code == 0 ? "" : r.out + r.err;
}

void flip(const std::string& path, std::uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x01));
}

std::string error_of(const std::string& path) {
  auto r = check_zip_archive(path);
  return r ? std::string("ok") : r.err().to_string();
}

TEST(zip_check, a_flipped_byte_in_any_kind_of_entry_is_found) {
  const auto dir = fs::temp_directory_path() / ("troupe-zip-check-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [compression, zip64] :
       {std::pair{"ZIP_STORED", false}, std::pair{"ZIP_STORED", true}, std::pair{"ZIP_DEFLATED", false}}) {
    const std::string what = std::string(compression) + (zip64 ? " zip64" : "");
    const auto path = (dir / "model.pt").string();
    std::uint64_t data_at = 0;
    ASSERT_EQ(make_zip(path, compression, zip64, data_at), "") << what;
    EXPECT_EQ(error_of(path), "ok") << what;
    flip(path, data_at + 100);
    const auto flipped = error_of(path);
    EXPECT_NE(flipped.find(path + ": entry 'archive/data/0'"), std::string::npos) << what << ": " << flipped;
    flip(path, data_at + 100);
    EXPECT_EQ(error_of(path), "ok") << what << ": flipped back";
    fs::resize_file(path, fs::file_size(path) - 30);
    const auto cut = error_of(path);
    EXPECT_NE(cut.find(path + ": not a TorchScript archive"), std::string::npos) << what << ": " << cut;
  }
  const auto junk = (dir / "junk.pt").string();
  std::ofstream(junk) << "junk";
  EXPECT_NE(error_of(junk).find(junk + ": not a TorchScript archive"), std::string::npos) << error_of(junk);
  EXPECT_NE(error_of((dir / "absent.pt").string()).find("No such file"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace troupe::nn
