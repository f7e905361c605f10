// The failure check of the MPI test programs: on a failed condition, print the rank, the
// condition, the line and a message, then end EVERY rank with MPI_Abort (non-zero exit), so
// no rank is left waiting in a collective.
#pragma once

#include <cstdio>
#include <exception>

#include "sar/comm/mpi.hpp"
#include "sar/core/error.hpp"

namespace sar::mpi_test {
/// Set by main() once the communicator exists.
inline mpi_communicator* the_comm = nullptr;

/// The main() of an MPI test: starts MPI, sets the_comm, runs body(comm); an exception
/// escaping body prints the rank and the message and ends every rank. Returns 0.
template <class Body>
int run_checked(int argc, char** argv, Body&& body) {
  mpi_environment env(argc, argv);
  mpi_communicator comm;
  the_comm = &comm;
  try {
    body(comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", comm.rank(), e.what());
    comm.abort(e.what());
  }
  return 0;
}
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
