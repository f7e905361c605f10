// One idea: sar inside a code that already owns MPI, its data distribution and its memory.
//
// The host is a toy heat-diffusion code on a grid of kColumns columns, split into strips of
// kRowsPerRank rows over its compute ranks. It calls MPI_Init itself, splits MPI_COMM_WORLD
// into compute ranks and (with 3 or more ranks) one I/O rank that only prints reports, keeps
// its temperature field in its own std::vector<double>, and exchanges its own halo rows.
// Every kStepsPerCycle steps of its time loop it trains a GCN for a few epochs to predict,
// from the field and the heat sources it holds, which cells warm up in the next step, and it
// reads the predictions back into its own array. sar gets:
//   - the compute sub-communicator (sar::mpi_communicator duplicates it: sar's messages never
//     meet the host's);
//   - the host's own distribution as a sar::graph_part: the strips are the parts, so no
//     partitioner runs and no node is relabelled;
//   - the features: an Eigen::Map over the host's own per-cell array, which the model and
//     the training loop read in place (no copy: layers take sar::const_rows_ref views);
//   - an Eigen::Map over the host's prediction array, which the logits are written into.
//
//   mpirun -np 3 build/examples/embed-in-simulation     (2 compute ranks + 1 I/O rank)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "sar/comm/mpi.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/sar.hpp"

#include <mpi.h>  // the host's own MPI calls (the C API: sar/comm/mpi.hpp skips the C++ one)

namespace {

constexpr int kColumns = 48;
constexpr int kRowsPerRank = 32;
constexpr int kSteps = 60;
constexpr int kStepsPerCycle = 20;

/// The host's state on one compute rank: its strip of the field, with its own halo rows.
struct heat_strip {
  int rank = 0, ranks = 1;
  std::vector<double> field;  // (kRowsPerRank + 2) x kColumns; rows 0 and last are halos
  std::vector<double> source;  // kRowsPerRank x kColumns, this step's heating
  /// Per-cell diagnostics the host keeps in single precision, row-major, one row per cell:
  /// temperature, heating, 1 (a constant column, as a bias feature).
  std::vector<float> observables;  // kRowsPerRank * kColumns x 3

  double& at(int row, int col) { return field[(row + 1) * kColumns + col]; }
  long global_id(int row, int col) const {
    return (static_cast<long>(rank) * kRowsPerRank + row) * kColumns + col;
  }

  /// Moving hot spots: deterministic in (step, global cell), like any forcing term.
  void heat(int step) {
    for (int r = 0; r < kRowsPerRank; ++r)
      for (int c = 0; c < kColumns; ++c) {
        const double y = rank * kRowsPerRank + r, x = c;
        const double wave = std::sin(0.21 * x + 0.13 * y - 0.4 * step) *
                            std::cos(0.17 * y - 0.11 * x + 0.3 * step);
        source[r * kColumns + c] = wave > 0.6 ? 1.0 : 0.0;
      }
  }

  /// Fills the diagnostics from this step's field and heating.
  void observe() {
    for (int r = 0; r < kRowsPerRank; ++r)
      for (int c = 0; c < kColumns; ++c) {
        float* row = &observables[3 * (r * kColumns + c)];
        row[0] = static_cast<float>(at(r, c));
        row[1] = static_cast<float>(source[r * kColumns + c]);
        row[2] = 1.0f;
      }
  }

  /// The host's own halo exchange with its neighbour strips (on its own communicator).
  void exchange_halos(MPI_Comm compute) {
    const int up = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    const int down = rank + 1 < ranks ? rank + 1 : MPI_PROC_NULL;
    double* first = &field[kColumns];
    double* last = &field[kRowsPerRank * kColumns];
    double* top_halo = &field[0];
    double* bottom_halo = &field[(kRowsPerRank + 1) * kColumns];
    std::fill(top_halo, top_halo + kColumns, 0.0);  // the grid's edges stay at 0
    std::fill(bottom_halo, bottom_halo + kColumns, 0.0);
    MPI_Sendrecv(first, kColumns, MPI_DOUBLE, up, 0, bottom_halo, kColumns, MPI_DOUBLE, down, 0,
                 compute, MPI_STATUS_IGNORE);
    MPI_Sendrecv(last, kColumns, MPI_DOUBLE, down, 1, top_halo, kColumns, MPI_DOUBLE, up, 1,
                 compute, MPI_STATUS_IGNORE);
  }

  /// One explicit diffusion step (needs fresh halos); returns the new field's interior.
  std::vector<double> next() {
    std::vector<double> out(kRowsPerRank * kColumns);
    for (int r = 0; r < kRowsPerRank; ++r)
      for (int c = 0; c < kColumns; ++c) {
        const double left = c > 0 ? at(r, c - 1) : 0.0;
        const double right = c + 1 < kColumns ? at(r, c + 1) : 0.0;
        const double lap = at(r - 1, c) + at(r + 1, c) + left + right - 4 * at(r, c);
        out[r * kColumns + c] = at(r, c) + 0.2 * lap + 0.5 * source[r * kColumns + c];
      }
    return out;
  }
};

/// The host's grid strip as sar's part `rank` of `ranks`: in-edges from the 4 neighbours and
/// the cell itself (GCN's A + I), columns are the host's global cell ids.
sar::graph_part strip_as_part(int rank, int ranks) {
  sar::graph_part part;
  part.part = rank;
  std::vector<sar::node_t> offsets;
  for (int q = 0; q <= ranks; ++q) offsets.push_back(sar::node_t(q) * kRowsPerRank * kColumns);
  part.book = sar::partition_book(offsets);
  sar::csr& g = part.in_edges;
  g.num_rows = kRowsPerRank * kColumns;
  g.num_cols = part.book.num_nodes();
  const long rows = long(ranks) * kRowsPerRank;
  for (int r = 0; r < kRowsPerRank; ++r)
    for (int c = 0; c < kColumns; ++c) {
      const long y = long(rank) * kRowsPerRank + r;
      // Sorted columns: up, left, self, right, down.
      if (y > 0) g.columns.push_back((y - 1) * kColumns + c);
      if (c > 0) g.columns.push_back(y * kColumns + c - 1);
      g.columns.push_back(y * kColumns + c);
      if (c + 1 < kColumns) g.columns.push_back(y * kColumns + c + 1);
      if (y + 1 < rows) g.columns.push_back((y + 1) * kColumns + c);
      g.offsets.push_back(static_cast<sar::edge_t>(g.columns.size()));
    }
  return part;
}

}  // namespace

int main(int argc, char** argv) {
  // sar's one setting, SAR_WATCHDOG_SECONDS, is read with the host's settings, before MPI
  // starts: a malformed value ends every rank alike with the message and exit code 1.
  double watchdog_seconds = 0;
  try {
    watchdog_seconds = sar::mpi_watchdog::default_limit_seconds();
  } catch (const sar::error& e) {
    std::fprintf(stderr, "embed-in-simulation: %s\n", e.what());
    return 1;
  }
  // The host owns MPI: it initialises it (sar's watchdog census wants THREAD_MULTIPLE; at a
  // lower level sar still works and its watchdog reports without asking the other ranks).
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const int io_rank = world_size >= 3 ? world_size - 1 : -1;
  const bool computes = world_rank != io_rank;
  MPI_Comm compute = MPI_COMM_NULL;  // the host's compute ranks; sar trains on them
  MPI_Comm_split(MPI_COMM_WORLD, computes ? 0 : 1, world_rank, &compute);
  int status = 0;

  if (computes) {
    // A duplicate of the host's compute communicator.
    sar::mpi_communicator comm(compute, watchdog_seconds);
    heat_strip strip;
    MPI_Comm_rank(compute, &strip.rank);
    MPI_Comm_size(compute, &strip.ranks);
    strip.field.assign((kRowsPerRank + 2) * kColumns, 0.0);
    strip.source.assign(kRowsPerRank * kColumns, 0.0);
    strip.observables.assign(kRowsPerRank * kColumns * 3, 0.0f);
    std::vector<float> predicted_rise(kRowsPerRank * kColumns);  // the host's output array

    // The model and the graph live across the time loop; the schedule is built once.
    sar::distributed_schedule<sar::mpi_communicator> graph(comm,
                                                           strip_as_part(strip.rank, strip.ranks));
    sar::model_config config = sar::paper_defaults("gcn");
    config.hidden = 32;
    config.dropout = 0;
    auto model = sar::make_model<float, sar::distributed_schedule<sar::mpi_communicator>>(
        config, /*features=*/3, /*classes=*/2, /*seed=*/11);
    auto optimiser = sar::make_optimiser(config, model);
    const sar::node_t n = kRowsPerRank * kColumns;
    std::vector<std::int32_t> labels(n);
    std::vector<sar::node_split> split(n);
    for (sar::node_t i = 0; i < n; ++i) {  // a fixed split of the cells, keyed by global id
      const long id = strip.global_id(int(i / kColumns), int(i % kColumns));
      split[i] = id % 5 == 0 ? sar::node_split::test
                 : id % 5 == 1 ? sar::node_split::valid : sar::node_split::train;
    }
    double accuracy = 0, majority = 1;  // of the last cycle's predictions, over all cells

    for (int step = 0; step < kSteps; ++step) {
      strip.heat(step);
      strip.exchange_halos(compute);
      std::vector<double> next = strip.next();
      if ((step + 1) % kStepsPerCycle == 0) {
        // The features are the host's diagnostics array, viewed where it is: the model and
        // the training loop read it in place (no copy).
        strip.observe();
        const Eigen::Map<const sar::matrix<float>> features(strip.observables.data(), n, 3);
        for (sar::node_t i = 0; i < n; ++i)  // the host's ground truth: does the cell warm up?
          labels[i] = next[i] > strip.field[kColumns + i] ? 1 : 0;
        // A few epochs on this cycle's data; the model and Adam's state carry over.
        sar::train_options options;
        options.epochs = 40;
        options.log_progress = false;
        const sar::train_result result = sar::train_full_batch(
            model, graph, optimiser, sar::node_data<float>{features, labels, split}, options);
        // Predictions back into the host's memory: the logits' rows are its cells.
        const sar::matrix<float>& logits =
            model.forward(graph, sar::layer_context{.training = false}, features);
        Eigen::Map<Eigen::VectorXf> rise(predicted_rise.data(), n);
        rise = logits.col(1) - logits.col(0);  // > 0: predicted to warm up
        long correct = 0, warm = 0;
        for (sar::node_t i = 0; i < n; ++i) {
          correct += (predicted_rise[i] > 0) == (labels[i] == 1);
          warm += labels[i];
        }
        std::vector<std::int64_t> counts{correct, warm, n};
        comm.all_reduce(std::span<std::int64_t>(counts), sar::reduce_op::sum);
        accuracy = double(counts[0]) / counts[2];
        majority = std::max(counts[1], counts[2] - counts[1]) / double(counts[2]);
        if (strip.rank == 0) {
          const double report[4] = {double(step + 1), result.test_score, accuracy,
                                    double(counts[1]) / counts[2]};
          if (io_rank >= 0)
            MPI_Send(report, 4, MPI_DOUBLE, io_rank, 7, MPI_COMM_WORLD);
          else
            std::printf("step %3.0f: test accuracy %.3f, all cells %.3f (warming %.2f)\n",
                        report[0], report[1], report[2], report[3]);
        }
      }
      std::copy(next.begin(), next.end(), strip.field.begin() + kColumns);
    }
    // The host decides what is good enough: clearly better than always answering the
    // majority class.
    if (!(accuracy > majority + 0.05)) status = 1;
  } else {
    for (int cycle = 0; cycle < kSteps / kStepsPerCycle; ++cycle) {  // the I/O rank
      double report[4];
      MPI_Recv(report, 4, MPI_DOUBLE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      std::printf("step %3.0f: test accuracy %.3f, all cells %.3f (warming %.2f)\n", report[0],
                  report[1], report[2], report[3]);
      std::fflush(stdout);
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (world_rank == 0) std::printf("embed-in-simulation: %s\n", status == 0 ? "ok" : "FAILED");
  MPI_Comm_free(&compute);
  MPI_Finalize();
  return status;
}
