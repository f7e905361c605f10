// The program the three build-system consumers (pkg-config, CMake, Meson subproject) compile
// against an installed or wrapped sar: it touches every dependency the flags must carry
// (Eigen, oneTBB, Random123, METIS, zlib, nlohmann-json, MPI, Boost.MPI) and checks that
// the ranks agree. Run it under mpirun -np 2; it prints "consumer: ok on P ranks".
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "sar/comm/mpi.hpp"
#include "sar/io/checksum.hpp"
#include "sar/graph/generators.hpp"
#include "sar/partition/metis.hpp"
#include "sar/version.hpp"

int main(int argc, char** argv) {
  sar::mpi_environment mpi(argc, argv);
  sar::mpi_communicator comm;
  // Every rank partitions the same small planted graph with METIS and keeps its own part.
  const sar::graph_dataset data = sar::make_planted_partition({.num_nodes = 600, .seed = 3});
  const std::vector<int> part = sar::partition_metis(data, comm.size());
  std::int64_t mine = 0;
  for (const int p : part) mine += p == comm.rank();
  std::vector<std::int64_t> total{mine};
  comm.all_reduce(std::span<std::int64_t>(total), sar::reduce_op::sum);
  // Same partition on every rank: the CRC-32 (zlib) of the assignment has one value.
  const std::uint32_t crc = sar::crc32_update(0, part.data(), part.size() * sizeof(int));
  std::vector<std::int64_t> low{crc}, high{crc};
  comm.all_reduce(std::span<std::int64_t>(low), sar::reduce_op::min);
  comm.all_reduce(std::span<std::int64_t>(high), sar::reduce_op::max);
  const bool ok = total[0] == data.num_nodes() && low[0] == high[0];
  if (comm.rank() == 0) {
    const nlohmann::json summary{{"sar", sar::version}, {"ranks", comm.size()},
                                 {"nodes", total[0]}, {"ok", ok}};
    std::printf("%s\nconsumer: %s on %d ranks\n", summary.dump().c_str(), ok ? "ok" : "FAILED",
                comm.size());
  }
  return ok ? 0 : 1;
}
