// What the programs that run under mpirun (sar-train, sar-partition, sar-predict) share in
// main(): the file size limit checked before MPI starts, one rank without mpirun, the same
// command line on every rank, and failures and lost standard output reported by name.
#pragma once

#include <optional>
#include <string>

#include "program_support.hpp"
#include "sar/comm/mpi.hpp"

namespace sar_programs {

/// main() after the command line is parsed: returns 1 if the file size limit is too small for
/// MPI (check_file_size_limit); else starts MPI (one rank without mpirun), checks that every
/// rank was given rank 0's command line (sar::check_same_on_every_rank), and returns
/// checked_stdout of sar::run_mpi_program(program, body, watchdog_seconds).
template <class Body>
int run_under_mpi(const char* program, int argc, char** argv, Body&& body,
                  std::optional<double> watchdog_seconds = std::nullopt) {
  if (const auto status = check_file_size_limit(program, true)) return *status;
  const std::string arguments = arguments_of(argc, argv);
  sar::mpi_environment mpi(argc, argv);
  return checked_stdout(
      program, sar::run_mpi_program(
                   program,
                   [&](sar::mpi_communicator& comm) {
                     sar::check_same_on_every_rank(
                         comm, sar::message(program, ": the command line"), arguments);
                     return body(comm);
                   },
                   watchdog_seconds));
}

}  // namespace sar_programs
