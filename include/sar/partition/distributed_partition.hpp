// The distributed partitioning pipeline: from a dataset, read in blocks (each rank holding a
// contiguous range of dataset ids with their in-edges, features, labels and split, as the
// parallel readers return it), to the parts each rank owns, relabelled, without any rank ever
// holding the whole graph (partition_distributed):
//
//   read        each rank's block (sar::read_dataset_block), a .npy dataset's features later
//   build       the symmetric adjacency of each rank's rows (sar::symmetric_adjacency);
//               skipped by the methods that read no edges
//   partition   PT-Scotch (ptscotch), or the distributed random / contiguous methods, which
//               give exactly what partition_random / partition_contiguous give on one process;
//               coarsened (distributed_partition_options::coarsening), PT-Scotch partitions
//               the graph of star clusters, or a sample of its arcs, and single nodes then
//               move to lower the cut (sar/partition/coarsen.hpp): less memory per rank
//   features    a .npy block's feature rows and in-edges, read now that the partitioner's
//               memory is free
//   redistribute every node to the rank owning its part, relabelled (sar::redistribute)
//
// Each phase reports its time and the largest rank's peak memory during it (rank 0 logs it):
// docs/large-graphs.md gives each phase's memory per rank as a formula.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sar/comm/communicator.hpp"
#include "sar/comm/mpi.hpp"
#include "sar/core/error.hpp"
#include "sar/core/log.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/rng.hpp"
#include "sar/partition/coarsen.hpp"
#include "sar/partition/distributed_build.hpp"
#include "sar/partition/graph_part.hpp"
#include "sar/partition/parallel_read.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/partition/ptscotch.hpp"
#include "sar/partition/redistribute.hpp"

namespace sar {

/// The distributed partitioning methods.
enum class distributed_method {
  ptscotch,    ///< PT-Scotch on the symmetric adjacency (a small edge cut)
  random,      ///< each node in a uniformly random part (partition_random's parts)
  contiguous,  ///< dataset-id ranges (partition_contiguous's parts)
};

/// The method named `name` ("ptscotch", "random", "contiguous"). Throws
/// sar::invalid_argument naming it otherwise.
inline distributed_method distributed_method_named(std::string_view name) {
  if (name == "ptscotch") return distributed_method::ptscotch;
  if (name == "random") return distributed_method::random;
  if (name == "contiguous") return distributed_method::contiguous;
  throw invalid_argument(message("unknown distributed partitioning method '", name,
                                 "' (ptscotch, random or contiguous)"));
}

/// What one phase of a distributed pipeline took: its seconds and the largest rank's peak
/// resident memory during it (and that rank).
struct phase_stats {
  /// The phase's name ("read", "build", ...).
  std::string name;
  /// Wall time of the slowest rank.
  double seconds = 0;
  /// The largest peak resident set over the ranks during the phase.
  std::int64_t peak_bytes = 0;
  /// The rank with that peak.
  int peak_rank = 0;
};

/// Measures the phases of a collective pipeline: each rank's peak resident memory is reset at
/// a phase's start (Linux: /proc/self/clear_refs) and read at its end (VmHWM), so a phase's
/// peak is its own, not the process's so far. Rank 0 logs a line per phase.
template <communicator Comm>
class phase_meter {
 public:
  /// Starts the first phase. Not collective.
  explicit phase_meter(Comm& comm) : comm_(comm) { restart(); }

  /// Ends the current phase as `name` and starts the next. Collective (one all-reduce).
  phase_stats end(std::string name) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    // max of (seconds, peak * size + rank): the largest peak and, among equals, its rank.
    std::int64_t values[2] = {static_cast<std::int64_t>(seconds * 1e6),
                              peak_since_reset() * comm_.size() + comm_.rank()};
    comm_.all_reduce(std::span<std::int64_t>(values, 2), reduce_op::max);
    phase_stats s{std::move(name), static_cast<double>(values[0]) / 1e6,
                  values[1] / comm_.size(), static_cast<int>(values[1] % comm_.size())};
    if (comm_.rank() == 0)
      log_info(message("phase ", s.name, ": ", s.seconds, " s; largest peak ",
                       static_cast<double>(s.peak_bytes) / (1 << 20), " MiB (rank ",
                       s.peak_rank, ")"));
    phases_.push_back(s);
    restart();
    return s;
  }
  /// Every phase ended so far.
  const std::vector<phase_stats>& phases() const { return phases_; }

 private:
  void restart() {
    std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM (Linux >= 4.0)
    start_ = std::chrono::steady_clock::now();
  }
  /// VmHWM of /proc/self/status in bytes; the process's peak (getrusage) where it is missing.
  static std::int64_t peak_since_reset() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
    return peak_memory_bytes();
  }
  Comm& comm_;
  std::chrono::steady_clock::time_point start_;
  std::vector<phase_stats> phases_;
};

/// How partition_distributed partitions.
struct distributed_partition_options {
  /// The method.
  distributed_method method = distributed_method::ptscotch;
  /// Number of parts (K); 0 = the number of ranks.
  int parts = 0;
  /// Seed of the random method and of PT-Scotch.
  std::uint64_t seed = 0;
  /// PT-Scotch's balance and imbalance (its seed is `seed`).
  ptscotch_options ptscotch{};
  /// Edges in flight per rank and round of the graph build.
  std::int64_t round_edges = default_build_round_edges;
  /// ptscotch: the graph PT-Scotch partitions made smaller (clusters, a sample of the arcs),
  /// then refined (none by default).
  coarsening_options coarsening{};
  /// ptscotch: free the block's in-edges once the adjacency is built, for a caller that
  /// reads them again after partitioning (not held during PT-Scotch's peak).
  bool release_in_edges = false;
};

namespace detail {
/// PT-Scotch's parts of `adjacency` made smaller by `coarsening` (star clusters, a sample of
/// the arcs), projected back to `adjacency`'s rows and refined there. Collective.
inline std::vector<int> partition_coarsened(mpi_communicator& comm, csr adjacency,
                                            const partition_book& book, int parts,
                                            const ptscotch_options& options,
                                            const coarsening_options& coarsening,
                                            phase_meter<mpi_communicator>* meter) {
  const indexed_adjacency g = index_adjacency(adjacency);
  const std::vector<std::int64_t> weights =
      balance_weights(options, g.rows(), [&](node_t r) { return g.degree(r); });
  adjacency = csr{};
  const std::vector<node_t> root =
      star_clusters(comm, g, book, std::max<node_t>(coarsening.cluster_size, 1), options.seed);
  coarse_graph coarse = contract(comm, g, book, root, weights);
  sample_arcs(coarse, comm.rank(), coarsening.arc_fraction, options.seed);
  std::int64_t arcs = coarse.adjacency.num_edges();
  comm.all_reduce(std::span<std::int64_t>(&arcs, 1), reduce_op::sum);
  if (comm.rank() == 0)
    log_info(message("coarsened: ", book.num_nodes(), " nodes as ", coarse.book.num_nodes(),
                     " clusters of at most ", coarsening.cluster_size, ", ", arcs,
                     " arcs for PT-Scotch"));
  if (meter) meter->end("coarsen");
  const std::vector<int> coarse_parts = partition_ptscotch(
      comm, std::move(coarse.adjacency), coarse.book, parts, options,
      {.vertices = std::move(coarse.vertex_weights), .arcs = std::move(coarse.arc_weights)});
  if (meter) meter->end("partition");
  std::vector<int> part = project(comm, coarse, coarse_parts);
  const std::int64_t moves = refine_parts(comm, g, book, weights, parts, options.imbalance, part,
                                          options.seed, coarsening.refine_rounds);
  if (comm.rank() == 0) log_info(message("refined: ", moves, " single-node moves"));
  return part;
}
}  // namespace detail

/// The part of each of `block`'s rows (block: this rank's range of dataset ids, in a book of one
/// range per rank) by `options.method`; block.in_edges left empty if
/// options.release_in_edges (ptscotch). Collective. Throws sar::invalid_argument for bad
/// options or a part left empty (on every rank alike), what PT-Scotch throws.
inline std::vector<int> partition_block(mpi_communicator& comm, graph_part& block,
                                        const distributed_partition_options& options,
                                        phase_meter<mpi_communicator>* meter = nullptr) {
  const int parts = options.parts == 0 ? comm.size() : options.parts;
  const node_t n = block.book.num_nodes(), first = block.book.begin(comm.rank());
  SAR_CHECK(parts >= 1 && parts <= std::max<node_t>(n, 1), invalid_argument,
            "sar::partition_block: ", parts, " parts for ", n, " nodes");
  std::vector<int> part(static_cast<std::size_t>(block.num_local()));
  const bool coarsened =
      options.method == distributed_method::ptscotch && options.coarsening.enabled();
  switch (options.method) {
    case distributed_method::random: {
      const counter_rng rng(options.seed, rng_stream::partition_random);
      for (node_t r = 0; r < block.num_local(); ++r)
        part[r] = static_cast<int>(rng.below(static_cast<std::uint64_t>(parts),
                                             static_cast<std::uint64_t>(first + r)));
      break;
    }
    case distributed_method::contiguous:
      for (node_t r = 0; r < block.num_local(); ++r)
        part[r] = contiguous_part_of(first + r, n, parts);
      break;
    case distributed_method::ptscotch: {
      csr adjacency = symmetric_adjacency(comm, block.in_edges, block.book, options.round_edges);
      if (options.release_in_edges) {  // num_local() is 0 from here
        block.in_edges = csr{};
        block.edge_features = matrixf();
      }
      if (meter) meter->end("build");
      ptscotch_options o = options.ptscotch;
      o.seed = options.seed;
      part = coarsened
                 ? detail::partition_coarsened(comm, std::move(adjacency), block.book, parts, o,
                                               options.coarsening, meter)
                 : partition_ptscotch(comm, std::move(adjacency), block.book, parts, o);
      break;
    }
  }
  // Every part is one rank's work later: none may be empty (as the one-process methods).
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(parts), 0);
  for (const int p : part) ++sizes[static_cast<std::size_t>(p)];
  comm.all_reduce(std::span<std::int64_t>(sizes), reduce_op::sum);
  check_part_sizes(sizes, n, "sar::partition_block");
  if (meter) meter->end(coarsened ? "refine" : "partition");
  return part;
}

/// The parts this rank owns (sar::part_owner) of the block-distributed dataset `block`,
/// partitioned by `options` and redistributed: partition_block, then what the block left
/// for later or freed while partitioning (read_block_rest: not held during the partitioner's
/// peak), then sar::redistribute. `block` is consumed. Collective.
inline std::vector<graph_part> partition_distributed(mpi_communicator& comm, dataset_block&& block,
                                                     distributed_partition_options options,
                                                     phase_meter<mpi_communicator>* meter = nullptr) {
  options.release_in_edges = block.rereadable;
  const std::vector<int> part = partition_block(comm, block.rows, options, meter);
  read_block_rest(comm, block);
  if (meter) meter->end("features");
  std::vector<graph_part> mine = redistribute(comm, std::move(block.rows), part,
                                              options.parts == 0 ? comm.size() : options.parts);
  if (meter) meter->end("redistribute");
  return mine;
}

}  // namespace sar
