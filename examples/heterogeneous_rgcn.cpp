// One idea: a graph with node and edge types (sar/graph/schema.hpp) trained with R-GCN, on one
// process or under mpirun -np P, where each rank trains on its METIS part and every rank count
// learns the same model. The graph is the planted heterogeneous one (papers and authors; a
// paper's class shows in which relation, "agrees" or "disagrees", links it to its neighbours),
// so the relations carry what a relation-blind model cannot see (docs/heterogeneous.md).
//
//   build/examples/heterogeneous-rgcn                 # one process
//   mpirun -np 2 build/examples/heterogeneous-rgcn    # two ranks (rank 0 writes a partition store)
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include "sar/comm/mpi.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/partition/metis.hpp"
#include "sar/partition/store.hpp"
#include "sar/sar.hpp"

/// Trains an R-GCN (a per-type input projection, then two R-GCN layers whose relation weights
/// mix two shared bases) on `graph` for 40 epochs; progress on the root.
template <class Schedule>
sar::train_result train(Schedule& graph, const sar::graph_schema& schema,
                        const sar::node_data<float>& nodes, Eigen::Index classes, bool root) {
  sar::model_config config = sar::paper_defaults("rgcn");
  config.schema = schema;  // node types with their feature widths, relations
  config.hidden = 16;
  config.rgcn_bases = 2;
  auto model = sar::make_model<float, Schedule>(config, nodes.features.cols(), classes, /*seed=*/3);
  auto optimiser = sar::make_optimiser(config, model);
  return sar::train_full_batch(model, graph, optimiser, nodes,
                               {.epochs = 40, .log_progress = root});
}

/// Builds the graph, then trains on every rank of `comm`. Collective.
int run(sar::mpi_communicator& comm) {
  const bool root = comm.rank() == 0;
  const sar::graph_dataset data =
      sar::make_planted_heterogeneous({.num_papers = 3000, .num_authors = 1000, .seed = 5});
  if (root) {
    std::printf("%lld nodes of %d types, %lld edges of %d relations:",
                static_cast<long long>(data.num_nodes()), data.schema.num_node_types(),
                static_cast<long long>(data.graph.num_edges()), data.schema.num_relations());
    for (const sar::relation& r : data.schema.relations)
      std::printf(" %s-%s->%s", data.schema.node_types[r.source_type].name.c_str(), r.name.c_str(),
                  data.schema.node_types[r.destination_type].name.c_str());
    std::printf("\n");
  }
  sar::train_result result;
  if (comm.size() == 1) {
    // Each stored edge carries its relation; the schedule hands them to the layers with the
    // blocks (no edge features here: an empty matrix).
    sar::local_schedule graph(sar::csr{data.graph}, sar::matrixf(),
                              std::vector<std::int32_t>(data.edge_types));
    result = train(graph, data.schema, {data.features, data.labels, data.split}, data.num_classes,
                   root);
  } else {
    // One METIS partition over all nodes, types kept: a part carries the schema and the
    // relation of each of its edges, and one halo plan serves every relation.
    std::int64_t id = root ? ::getpid() : 0;  // one name on every rank
    comm.broadcast(std::span<std::int64_t>(&id, 1), 0);
    const auto dir = std::filesystem::temp_directory_path() /
                     ("sar-heterogeneous-rgcn-" + std::to_string(id));
    if (root)
      sar::write_partition_store(data, sar::partition_metis(data, comm.size()), comm.size(), dir,
                                 "metis");
    comm.barrier();
    const sar::graph_part part = sar::read_partition_part(dir, comm.rank());
    sar::distributed_schedule<sar::mpi_communicator> graph(comm, part);
    result = train(graph, part.schema, {part.features, part.labels, part.split}, part.num_classes,
                   root);
    comm.barrier();
    if (root) std::filesystem::remove_all(dir);
  }
  if (root)
    std::printf("%d ranks: best epoch %d, validation accuracy %.3f, test accuracy %.3f\n",
                comm.size(), result.best_epoch, result.best_valid_score, result.test_score);
  return 0;
}

int main(int argc, char** argv) {
  sar::mpi_environment mpi(argc, argv);  // also without mpirun: one rank
  return sar::run_mpi_program("heterogeneous-rgcn", run);
}
