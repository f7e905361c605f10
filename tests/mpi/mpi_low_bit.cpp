// Run under mpirun -np N. The low-bit, bounded-stale exchange (Sylvie) on P ranks:
//  - staleness semantics, exactly (plain rows, S = 3): in an epoch that is not a multiple of
//    S, every remote halo row a gather visits is the row sent in the previous epoch, the
//    gather_scatter of the same exchange visits the same rows, and a scatter adds the
//    gradients sent in the previous epoch (what a synchronous scatter of that epoch adds);
//    epoch 0, every S-th epoch and the first call after a fresh start are synchronous;
//  - a stale call makes no collective of its own: a visitor that throws, or a mis-shaped x, in
//    a stale call on one rank is reported on every rank at the next all_reduce_sum;
//  - with 2-bit codecs, the stale gather_scatter visits bitwise the rows its gather visited;
//  - the same with the stale transfers paced in small chunks (many per block);
//  - training (SAGE and GAT on Cora, METIS parts) with 1-bit halos and S = 5 is bitwise
//    reproducible, also on 1 and 2 threads per rank and with paced transfers, and learns;
//  - traffic: at hidden width 128, 1-bit halos send at most 1/20 of the halo bytes (features
//    plus gradients) that fp32 sends, per epoch, with the first layer exact in both, on dense
//    and on sparse input features (SAGE and GCN): no configured codec is bypassed unasked.
// Any failure prints the rank and ends every rank with MPI_Abort (exit code non-zero).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <tbb/global_control.h>

#include "mpi_check.hpp"
#include "mpi_parts.hpp"
#include "sar/comm/mpi.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/graph/generators.hpp"
#include "sar/graph/io/ogb.hpp"
#include "sar/partition/metis.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/train/full_batch.hpp"
#include "sar/train/models.hpp"

using namespace sar;

namespace {

using mpi_test::the_comm;
using schedule = distributed_schedule<mpi_communicator>;

/// The value a rank sends for (node, column) in epoch t: any rank can tell what it should see.
double value(node_t id, Eigen::Index j, std::uint64_t t) {
  // Integer arithmetic first: no contraction into FMAs can make two call sites differ.
  const auto k = (static_cast<std::int64_t>(id) * 37 + j * 130 + static_cast<std::int64_t>(t) * 211) % 10007;
  return std::sin(static_cast<double>(k) * 1e-3);
}

matrixd rows_of_epoch(const schedule& s, Eigen::Index width, std::uint64_t t) {
  matrixd x(s.num_local(), width);
  for (node_t i = 0; i < s.num_local(); ++i)
    for (Eigen::Index j = 0; j < width; ++j) x(i, j) = value(s.node_id(i), j, t);
  return x;
}

/// Checks that every row of `halo` is the row of epoch `t` (epoch `local_t` for the local
/// block, which is x itself).
template <class Halo>
void expect_rows(const schedule& s, const graph_block& b, const Halo& halo, std::uint64_t t,
                 std::uint64_t local_t, const char* what) {
  const bool local = &b == &s.graph().block(the_comm->rank());
  const std::uint64_t epoch = local ? local_t : t;
  for (node_t r = 0; r < b.num_sources(); ++r)
    for (Eigen::Index j = 0; j < halo.cols(); ++j)
      EXPECT(halo(r, j) == value(b.source_id(r), j, epoch), what, ": halo row of node ",
             b.source_id(r), " is not the row of epoch ", epoch, " (local block: ", local, "; row ", r, " of ", b.num_sources(), ", column ", j, ": ", halo(r, j), " vs ", value(b.source_id(r), j, epoch), ")");
}

/// Adds the gradient of epoch t of every remote halo row (the local block adds nothing).
template <class DHalo>
void add_gradients(const schedule& s, const graph_block& b, DHalo& dhalo, std::uint64_t t) {
  if (&b == &s.graph().block(the_comm->rank())) return;
  for (node_t r = 0; r < b.num_sources(); ++r)
    for (Eigen::Index j = 0; j < dhalo.cols(); ++j) dhalo(r, j) += 0.5 * value(b.source_id(r), j, t + 7);
}

/// The rows and gradients every call sees under staleness S = 3; with progress_us > 0 the same
/// while a progress thread polls MPI (and it does poll); with pace_chunk_bytes > 0 the same
/// with the stale transfers paced in chunks of that many bytes.
void check_staleness_semantics(mpi_communicator& comm, const graph_part& part, int progress_us,
                               std::size_t pace_chunk_bytes = 0) {
  constexpr int S = 3;
  constexpr Eigen::Index W = 5;
  exchange_options o;
  o.policy.staleness = S;
  o.transport.progress_interval_us = progress_us;
  o.transport.pace_chunk_bytes = pace_chunk_bytes;
  schedule stale(comm, part, std::move(o));
  schedule sync(comm, part);
  const node_t n = stale.num_local();
  // Until the progress thread has polled once, a pause of up to 20 ms after each stale call:
  // a transfer left in flight between calls is its reason to poll, and on a loaded machine it
  // may otherwise not be scheduled in the microseconds a call of this small graph lasts.
  const auto let_progress_run = [&] {
    for (int ms = 0; ms < 20 && progress_us > 0 && stale.progress_polls() == 0; ++ms)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  for (std::uint64_t t = 0; t < 8; ++t) {
    const std::uint64_t used = t % S == 0 ? t : t - 1;
    const matrixd x = rows_of_epoch(stale, W, t);
    // A GCN-like layer: gather forward, scatter backward.
    exchange_key gcn{.layer = 1, .call = 0, .seed = 3, .epoch = t};
    stale.gather(gcn, x, [&](const graph_block& b, const auto& halo) {
      expect_rows(stale, b, halo, used, t, "stale gather");
    });
    let_progress_run();
    matrixd dx = matrixd::Zero(n, W), dx_sync = matrixd::Zero(n, W);
    stale.scatter(gcn, dx, [&](const graph_block& b, auto& dhalo) { add_gradients(stale, b, dhalo, t); });
    let_progress_run();
    sync.scatter(gcn, dx_sync, [&](const graph_block& b, auto& dhalo) { add_gradients(sync, b, dhalo, used); });
    EXPECT((dx - dx_sync).cwiseAbs().maxCoeff() <= 1e-12, "epoch ", t,
           ": the stale scatter did not add the gradients of epoch ", used);
    // A GAT-like layer: gather forward, gather_scatter backward (the same rows again).
    exchange_key gat{.layer = 2, .call = 0, .seed = 3, .epoch = t};
    stale.gather(gat, x, [&](const graph_block& b, const auto& halo) {
      expect_rows(stale, b, halo, used, t, "stale gather (GAT)");
    });
    matrixd dx2 = matrixd::Zero(n, W);
    stale.gather_scatter(gat, x, dx2, [&](const graph_block& b, const auto& halo, auto& dhalo) {
      expect_rows(stale, b, halo, used, t, "stale gather_scatter");
      add_gradients(stale, b, dhalo, t);
    });
    EXPECT((dx2 - dx_sync).cwiseAbs().maxCoeff() <= 1e-12, "epoch ", t,
           ": the stale gather_scatter did not add the gradients of epoch ", used);
    // Evaluation calls are synchronous.
    exchange_key eval = gcn;
    eval.training = false;
    stale.gather(eval, x, [&](const graph_block& b, const auto& halo) {
      expect_rows(stale, b, halo, t, t, "evaluation gather");
    });
  }
  // A fresh schedule starting at an epoch that is not a multiple of S has nothing to be stale
  // with: synchronous (never zeros).
  exchange_options fresh_options;
  fresh_options.policy.staleness = S;
  schedule fresh(comm, part, std::move(fresh_options));
  const matrixd x5 = rows_of_epoch(fresh, W, 5);
  fresh.gather(exchange_key{.layer = 1, .epoch = 5}, x5, [&](const graph_block& b, const auto& halo) {
    expect_rows(fresh, b, halo, 5, 5, "first gather at epoch 5");
  });
  EXPECT((stale.progress_polls() > 0) == (progress_us > 0 && comm.size() > 1), "rank ",
         comm.rank(), ": ", stale.progress_polls(), " progress polls with an interval of ",
         progress_us, " us");
  if (comm.rank() == 0)
    std::printf("ok  staleness semantics (S = %d, progress thread every %d us, paced in %zu-byte "
                "chunks)\n", S, progress_us, pace_chunk_bytes);
}

/// A stale call runs without agreements: what fails in it on the last rank (its visitor
/// throws, or it passes a wider x) is reported on every rank by the next all_reduce_sum, the
/// last rank with its own error, the others naming it; nobody hangs.
void check_stale_failures(mpi_communicator& comm, const graph_part& part) {
  const int last = comm.size() - 1;
  const bool fails_here = comm.rank() == last;
  for (const bool misshaped : {false, true}) {
    exchange_options o;
    o.policy.staleness = 3;
    schedule s(comm, part, std::move(o));
    const matrixd x = rows_of_epoch(s, 5, 0), wide = matrixd::Zero(s.num_local(), 6);
    exchange_key k{.layer = 1, .epoch = 0};
    s.gather(k, x, [](const graph_block&, const auto&) {});  // synchronous
    k.epoch = 1;
    s.gather(k, misshaped && fails_here ? wide : x, [&](const graph_block&, const auto&) {
      if (!misshaped && fails_here) throw std::runtime_error("the visitor failed");
    });  // stale: returns on every rank
    std::string what = "nothing";
    double v = 1;
    try {
      s.all_reduce_sum(std::span<double>(&v, 1));
    } catch (const std::exception& e) {
      what = e.what();
    }
    const std::string expected = !fails_here ? "rank " + std::to_string(last) + " failed"
                                 : misshaped ? "and 6 columns to a stale call"
                                             : "the visitor failed";
    EXPECT(what.find(expected) != std::string::npos, "rank ", comm.rank(),
           ": all_reduce_sum after a stale call that ", misshaped ? "was mis-shaped" : "threw",
           " on rank ", last, " reported '", what, "', expected '", expected, "'");
  }
  if (comm.rank() == 0) std::printf("ok  a failure in a stale call is reported on every rank\n");
}

/// With lossy codecs, a stale gather_scatter visits bitwise the rows its gather visited.
void check_lossy_backward_rows(mpi_communicator& comm, const graph_part& part) {
  schedule s(comm, part, low_bit_exchange(2, 2, 4));
  const node_t n = s.num_local();
  for (std::uint64_t t = 0; t < 6; ++t) {
    const matrixf x = rows_of_epoch(s, 9, t).cast<float>();
    const exchange_key key{.layer = 3, .epoch = t};  // not the first layer: quantised
    s.gather(exchange_key{.layer = 0, .epoch = t, .first_layer_input = true}, x,
             [](const graph_block&, const auto&) {});
    std::vector<matrixf> seen(static_cast<std::size_t>(comm.size()));
    auto block_index = [&](const graph_block& b) {
      for (int q = 0; q < comm.size(); ++q)
        if (&b == &s.graph().block(q)) return static_cast<std::size_t>(q);
      return std::size_t{0};
    };
    s.gather(key, x, [&](const graph_block& b, const auto& halo) { seen[block_index(b)] = halo; });
    matrixf dx = matrixf::Zero(n, 9);
    s.gather_scatter(key, x, dx, [&](const graph_block& b, const auto& halo, auto&) {
      EXPECT(seen[block_index(b)] == halo, "epoch ", t, ": gather_scatter visited other rows "
             "than its gather");
    });
  }
  if (comm.rank() == 0) std::printf("ok  lossy stale gather_scatter sees its gather's rows\n");
}

struct run_result {
  std::vector<double> losses;
  std::vector<std::int64_t> halo_bytes;  ///< per epoch, features + gradients, this rank
  double test_score = 0;
};

/// Trains `config` on `part` (on its features as sparse rows when `sparse`).
run_result train(mpi_communicator& comm, const graph_part& part, const model_config& config,
                 exchange_options options, int threads, bool sparse = false) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
  schedule graph(comm, part, std::move(options));
  const matrixf& x = part.features;
  const sparse_rows<float> sparse_x = to_sparse_rows<float, float>(x);
  auto model = make_model<float, schedule>(config, x.cols(), part.num_classes, 11);
  auto optimiser = make_optimiser(config, model);
  train_options o{.epochs = config.epochs, .seed = 5, .log_progress = false};
  run_result out;
  std::int64_t before = 0;
  node_data<float> data{x, part.labels, part.split};
  if (sparse) data.sparse_features = &sparse_x;
  const auto result = train_full_batch(
      model, graph, optimiser, data, o,
      [&](const epoch_stats&) {
        const auto& t = graph.traffic();
        out.halo_bytes.push_back(t.feature_bytes + t.gradient_bytes - before);
        before = t.feature_bytes + t.gradient_bytes;
      });
  for (const auto& e : result.history) out.losses.push_back(e.train_loss);
  out.test_score = result.test_score;
  return out;
}

void check_training(mpi_communicator& comm, const graph_dataset& cora) {
  graph_part part = mpi_test::cut_part(cora, partition_metis(cora, comm.size(), {.seed = 1}),
                                       comm.size(), comm.rank());
  part.in_edges = with_self_loops(part.in_edges, self_loop_policy::add, part.first_global());
  for (const std::string kind : {"sage", "gat"}) {
    model_config c = paper_defaults(kind);
    c.epochs = 12;
    c.patience = 0;
    c.input_dropout = 0;
    c.aggregate_features_first = true;
    if (kind == "gat") c.heads = 2;
    const std::string name = kind == "sage" ? "sage" : "gat";
    const run_result a = train(comm, part, c, low_bit_exchange(1, 1, 5), 1);
    const run_result b = train(comm, part, c, low_bit_exchange(1, 1, 5), 1);
    const run_result two = train(comm, part, c, low_bit_exchange(1, 1, 5), 2);
    exchange_options paced = low_bit_exchange(1, 1, 5);
    paced.transport.progress_interval_us = 50;
    paced.transport.pace_chunk_bytes = 64;
    const run_result paced_run = train(comm, part, c, std::move(paced), 1);
    EXPECT(a.losses == b.losses, name, ": two 1-bit stale runs differ");
    EXPECT(a.losses == two.losses, name, ": 1 and 2 threads per rank differ");
    EXPECT(a.losses == paced_run.losses, name, ": paced stale transfers changed the losses");
    EXPECT(a.losses.back() < 0.8 * a.losses.front(), name, ": 1-bit stale training did not learn (",
           a.losses.front(), " -> ", a.losses.back(), ")");
    if (comm.rank() == 0)
      std::printf("ok  %s 1-bit S=5: bitwise reproducible on 1 and 2 threads and paced; loss %.3f -> %.3f\n",
                  name.c_str(), a.losses.front(), a.losses.back());
  }
  // Traffic at hidden width 128 (3 layers: the hidden layers exchange 128 wide rows), from
  // epoch 1 on (epoch 0 also sends the first layer's halo, once); on Cora's features dense and
  // as sparse rows, where the first layer would apply its weight first and exchange x W (it
  // aggregates the rows it is given as aggregate_features_first asks).
  for (const std::string kind : {"sage", "gcn"})
    for (const bool sparse : {false, true}) {
      model_config c = paper_defaults(kind);
      c.layers = 3;
      c.hidden = 128;
      c.epochs = 4;
      c.input_dropout = 0;
      c.aggregate_features_first = true;
      const run_result fp32 = train(comm, part, c, low_bit_exchange(32, 32, 1), 2, sparse);
      const run_result one_bit = train(comm, part, c, low_bit_exchange(1, 1, 1), 2, sparse);
      std::int64_t bytes[2] = {0, 0};
      for (std::size_t e = 1; e < fp32.halo_bytes.size(); ++e) {
        bytes[0] += fp32.halo_bytes[e];
        bytes[1] += one_bit.halo_bytes[e];
      }
      comm.all_reduce(std::span<std::int64_t>(bytes, 2), reduce_op::sum);
      const char* what = kind == "sage" ? "sage" : "gcn";
      const char* input = sparse ? "sparse" : "dense";
      if (comm.size() > 1) {
        EXPECT(bytes[0] > 0 && 20 * bytes[1] <= bytes[0], what, " on ", input, " features: "
               "1-bit halos sent ", bytes[1], " bytes against fp32's ", bytes[0],
               " (more than 1/20)");
        if (comm.rank() == 0)
          std::printf("ok  %s, %s features, hidden 128: 1-bit halos send 1/%.1f of fp32's bytes "
                      "per epoch\n", what, input,
                      static_cast<double>(bytes[0]) / static_cast<double>(bytes[1]));
      }
    }
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_test::run_checked(argc, argv, [](mpi_communicator& comm) {
    const int P = comm.size();
    {
      tbb::global_control threads(tbb::global_control::max_allowed_parallelism, 1);
      graph_dataset rmat = make_rmat_dataset({.scale = 9, .num_edges = 3000, .seed = 4});
      const graph_part part = mpi_test::cut_part(
          rmat, partition_random(rmat.num_nodes(), P, 2), P, comm.rank());
      check_staleness_semantics(comm, part, 0);
      check_staleness_semantics(comm, part, 100);
      check_staleness_semantics(comm, part, 100, 24);  // blocks of 5 doubles: many chunks each
      check_lossy_backward_rows(comm, part);
      check_stale_failures(comm, part);
    }

    const char* dir = std::getenv("SAR_DATA_DIR");
    EXPECT(dir != nullptr, "SAR_DATA_DIR is not set");
    check_training(comm, read_ogb_raw(std::string(dir) + "/cora"));
    if (comm.rank() == 0) std::printf("low-bit exchange: all checks passed on %d ranks\n", P);
  });
}
