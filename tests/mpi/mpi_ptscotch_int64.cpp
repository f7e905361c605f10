// sar's PT-Scotch path built against Debian's 64-bit index variant (scotch-int64, what
// -Dptscotch_index=64 links for graphs past 2^31 - 1 arcs): the same checks as the 32-bit
// build's (ptscotch_check.hpp), so the wide build is exercised by every suite run even though
// a graph that needs it does not fit this machine.
#include <cstdint>
#include <limits>

#include "mpi_check.hpp"
#include "ptscotch_check.hpp"

static_assert(sizeof(SCOTCH_Num) == 8, "built against the 64-bit PT-Scotch (scotch-int64)");
static_assert(sar::ptscotch_max_count == std::numeric_limits<std::int64_t>::max());

int main(int argc, char** argv) {
  return sar::mpi_test::run_checked(argc, argv, [](sar::mpi_communicator& comm) {
    sar::mpi_test::test_ptscotch(comm);
  });
}
