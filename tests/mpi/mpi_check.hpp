// The failure check of the MPI test programs: on a failed condition, print the rank, the
// condition, the line and a message, then end EVERY rank with MPI_Abort (non-zero exit), so
// no rank is left waiting in a collective.
#pragma once

#include <cstdio>

#include "sar/comm/mpi.hpp"
#include "sar/core/error.hpp"

namespace sar::mpi_test {
/// Set by main() once the communicator exists.
inline mpi_communicator* the_comm = nullptr;
}  // namespace sar::mpi_test

#define EXPECT(cond, ...)                                                                \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "rank %d: FAILED %s (line %d): %s\n",                         \
                   ::sar::mpi_test::the_comm->rank(), #cond, __LINE__,                   \
                   ::sar::message(__VA_ARGS__).c_str());                                 \
      std::fflush(stderr);                                                               \
      ::sar::mpi_test::the_comm->abort("test failure");                                  \
    }                                                                                    \
  } while (false)
