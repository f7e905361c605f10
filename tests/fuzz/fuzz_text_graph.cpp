// libFuzzer target: the edge-list and Matrix Market readers on arbitrary bytes (the first
// byte chooses the reader).
#include "sar/graph/io/edge_list.hpp"
#include "sar/graph/io/matrix_market.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  sar::io::chunk_bytes = 256;  // small chunks: fast, and chunk boundaries get fuzzed too
  if (size == 0) return 0;
  const auto file = sar_fuzz::scratch() / "input";
  sar_fuzz::write_bytes(file, data + 1, size - 1);
  sar_fuzz::expect_clear_errors([&] {
    if (data[0] & 1) sar::read_matrix_market(file);
    else sar::read_edge_list(file);
  });
  return 0;
}
