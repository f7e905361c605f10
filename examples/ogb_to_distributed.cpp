// One idea: the data path of a distributed run inside one program. Load an Open Graph
// Benchmark directory (raw layout: edge.csv.gz, node-feat.csv.gz, node-label.csv.gz, split/),
// partition it with METIS into one part per rank, write a partition store (rank 0), read each
// rank's part, and train a GCN on all ranks with the sequential (SAR) schedule.
// (sar-partition and sar-train do the same as two programs, with more options.)
//
//   mpirun -np 2 build/examples/ogb-to-distributed ../shared/data/cora [STORE_DIR]
//
// STORE_DIR (default: a directory under the system's temporary directory, removed at the end)
// is written safely: a partition store there is replaced, anything else is refused.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "sar/comm/mpi.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/graph/io/load.hpp"
#include "sar/partition/metis.hpp"
#include "sar/partition/store.hpp"
#include "sar/sar.hpp"

/// Loads `dataset` on rank 0, partitions and writes it to `store_dir` (empty: a temporary
/// directory), then trains on every rank's part. Collective; returns the exit status.
int run(sar::mpi_communicator& comm, const std::string& dataset, const std::string& store_dir) {
  const bool root = comm.rank() == 0;
  const bool temporary = store_dir.empty();
  const std::filesystem::path store =
      temporary ? std::filesystem::temp_directory_path() /
                      ("sar-ogb-to-distributed-" + std::to_string(comm.size()))
                : std::filesystem::path(store_dir);

  // 1. Rank 0 loads, partitions and writes. Every rank learns whether that failed, so an
  //    error (a missing file, a foreign STORE_DIR) ends all of them, none left waiting.
  std::string error;
  if (root) {
    try {
      sar::graph_dataset data = sar::load_dataset(dataset);
      data.graph = sar::with_self_loops(data.graph, sar::self_loop_policy::add);  // A + I
      const std::vector<int> assignment = sar::partition_metis(data, comm.size());
      sar::write_partition_store(data, assignment, comm.size(), store, "metis");
      std::printf("%s: %lld nodes in %d parts written to %s\n", dataset.c_str(),
                  static_cast<long long>(data.num_nodes()), comm.size(), store.c_str());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  std::int64_t failed = error.empty() ? 0 : 1;
  comm.all_reduce(std::span<std::int64_t>(&failed, 1), sar::reduce_op::max);
  if (failed) {
    if (root) std::fprintf(stderr, "ogb-to-distributed: %s\n", error.c_str());
    return 1;
  }

  // 2. Every rank reads only its own part (checksums verified) and trains on it.
  const sar::graph_part part = sar::read_partition_part(store, comm.rank());
  sar::distributed_schedule<sar::mpi_communicator> graph(comm, part);
  const sar::model_config config = sar::paper_defaults("gcn");
  auto model = sar::make_model<float, sar::distributed_schedule<sar::mpi_communicator>>(
      config, part.features.cols(), part.num_classes, /*seed=*/1);
  auto optimiser = sar::make_optimiser(config, model);
  sar::train_options options;
  options.epochs = 100;
  options.log_progress = false;
  const sar::train_result result = sar::train_full_batch(
      model, graph, optimiser, sar::node_data<float>{part.features, part.labels, part.split},
      options);
  if (root)
    std::printf("%d ranks: best epoch %d, validation accuracy %.3f, test accuracy %.3f\n",
                comm.size(), result.best_epoch, result.best_valid_score, result.test_score);
  comm.barrier();
  if (root && temporary) std::filesystem::remove_all(store);
  return result.test_score > 0.5 ? 0 : 1;
}

int main(int argc, char** argv) {
  // The settings, read before MPI starts: OGB_DIR [STORE_DIR] (and, in the communicator,
  // SAR_WATCHDOG_SECONDS). Every rank reads them alike, so each ends alike on an error.
  const bool help = argc == 2 && std::string(argv[1]) == "--help";
  if (argc < 2 || argc > 3 || help) {
    std::fprintf(help ? stdout : stderr, "%susage: mpirun -np P %s OGB_DIR [STORE_DIR]\n",
                 help ? "" : "ogb-to-distributed: ", argv[0]);
    return help ? 0 : 1;
  }
  const std::string dataset = argv[1];
  const std::string store_dir = argc == 3 ? argv[2] : "";
  sar::mpi_environment mpi(argc, argv);
  return sar::run_mpi_program("ogb-to-distributed", [&](sar::mpi_communicator& comm) {
    return run(comm, dataset, store_dir);
  });
}
