// libFuzzer target: the manifest rule's reader. The input is the metadata file of a small
// directory of a test kind (two files, one nested); check_replaceable reads its format, seal
// and manifest and compares the directory with it. A sar::error (refused) or true (replaceable)
// are the expected answers; nothing in the directory may change either way.
#include <filesystem>

#include "sar/io/safe_directory.hpp"
#include "fuzz_support.hpp"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const sar::directory_kind kind{"fuzz-kind", "meta.json"};
  static const fs::path dir = [] {
    const auto d = sar_fuzz::scratch() / "manifest";
    sar::replace_directory(d, kind, [](sar::directory_writer& out) {
      out.make_directory("part-0000");
      for (const char* name : {"a.bin", "part-0000/b.bin"})
        out.add_file(name, [](const fs::path& file) {
          const std::uint8_t bytes[] = {1, 2, 3};
          sar_fuzz::write_bytes(file, bytes, sizeof bytes);
          return sar::crc32_update(0, bytes, sizeof bytes);
        });
      out.write_metadata(nlohmann::json{{"format", "fuzz-kind"}});
    }, "fuzz");
    if (std::getenv("SAR_FUZZ_WRITE_SEEDS") != nullptr) {  // the valid metadata as a seed
      fs::create_directories(std::getenv("SAR_FUZZ_WRITE_SEEDS"));
      fs::copy_file(d / "meta.json", fs::path(std::getenv("SAR_FUZZ_WRITE_SEEDS")) / "meta.json",
                    fs::copy_options::overwrite_existing);
    }
    return d;
  }();
  sar_fuzz::write_bytes(dir / "meta.json", data, size);
  sar_fuzz::expect_clear_errors([&] {
    if (!sar::check_replaceable(dir, kind, "fuzz")) __builtin_trap();  // it exists
    const auto meta = nlohmann::json::parse(
        std::string(reinterpret_cast<const char*>(data), size), nullptr, false);
    (void)sar::manifest::from_metadata(meta, "meta.json", "checksums").to_json();
  });
  if (!fs::exists(dir / "a.bin") || !fs::exists(dir / "part-0000" / "b.bin")) __builtin_trap();
  return 0;
}
