// libFuzzer target: a .npy file's header and data reader on arbitrary bytes.
#include <vector>

#include "sar/io/npy_file.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = sar_fuzz::scratch() / "input.npy";
  sar_fuzz::write_bytes(file, data, size);
  sar_fuzz::expect_clear_errors([&] {
    const sar::npy_header header = sar::read_npy_header(file);  // size matches the file
    std::vector<char> out(header.data_bytes());
    sar::read_npy_data(file, header, out.data(), true);
  });
  return 0;
}
