// Run under mpirun -np N. Every rank builds the same graphs (Cora with self-loops, METIS
// parts; a directed R-MAT graph with duplicate edges, self-loops, isolated nodes and random
// parts, one of them EMPTY when N >= 3), relabels them, takes its own part and runs every
// layer under the three distributed schedules (sequential with prefetch depth 0, 1 and 2,
// keep_halo, one_shot). Each result is compared with the same layer run under local_schedule
// on the whole graph on every rank: forward rows, input-gradient rows and all-reduced
// parameter gradients, within 1e-10 (double) and 1e-5 (float), relative. Also checked: the
// out-degree exchange, bytes per call, the ring's live-block bound, keep_halo's reuse, error
// agreement (a bad argument or a throwing visitor on one rank ends every rank with an
// exception, and the schedule stays usable), and the serial communicator at P = 1.
// Any failure prints the rank and ends every rank with MPI_Abort (exit code non-zero).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <tbb/global_control.h>

#include "sar/schedule/local_schedule.hpp"
#include "sar/comm/mpi.hpp"
#include "mpi_check.hpp"
#include "sar/comm/serial.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/generators.hpp"
#include "sar/graph/io/ogb.hpp"
#include "sar/nn/batch_norm.hpp"
#include "sar/nn/dropout.hpp"
#include "sar/nn/gat.hpp"
#include "sar/nn/gcn.hpp"
#include "sar/nn/sage.hpp"
#include "sar/partition/metis.hpp"
#include "sar/partition/relabel.hpp"

using namespace sar;

namespace {

using mpi_test::the_comm;

/// A relabelled graph (every rank holds it whole, for the reference) and this rank's part.
struct test_graph {
  std::string name;
  csr whole;  ///< relabelled: part q owns [book.begin(q), book.end(q))
  graph_part part;
};

/// Relabels `g` by `assignment` and cuts this rank's part out of it.
test_graph make_test_graph(std::string name, const csr& g, const std::vector<int>& assignment,
                           int P, int p) {
  const relabelling r = relabel(assignment, P);
  test_graph t{std::move(name), {}, {}};
  const node_t n = g.num_rows;
  t.whole.num_rows = t.whole.num_cols = n;
  t.whole.offsets.assign(1, 0);
  for (node_t i = 0; i < n; ++i) {
    const auto row = g.row(r.old_of_new[i]);
    const std::size_t from = t.whole.columns.size();
    for (node_t c : row) t.whole.columns.push_back(r.new_of_old[c]);
    std::sort(t.whole.columns.begin() + from, t.whole.columns.end());
    t.whole.offsets.push_back(static_cast<edge_t>(t.whole.columns.size()));
  }
  t.part.part = p;
  t.part.book = r.book;
  csr& in = t.part.in_edges;
  in.num_rows = r.book.size(p);
  in.num_cols = n;
  in.offsets.assign(1, 0);
  for (node_t i = r.book.begin(p); i < r.book.end(p); ++i) {
    const auto row = t.whole.row(i);
    in.columns.insert(in.columns.end(), row.begin(), row.end());
    in.offsets.push_back(static_cast<edge_t>(in.columns.size()));
  }
  return t;
}

test_graph cora_graph(int P, int p) {
  const char* dir = std::getenv("SAR_DATA_DIR");
  EXPECT(dir != nullptr, "SAR_DATA_DIR is not set");
  graph_dataset data =
      read_ogb_raw(std::string(dir) + "/cora", {.self_loops = self_loop_policy::add});
  const auto assignment = partition_metis(data, P, {.seed = 3});
  return make_test_graph("cora", data.graph, assignment, P, p);
}

/// Directed R-MAT: duplicates and self-loops kept, isolated nodes; random parts, part P/2
/// emptied into its neighbours when P >= 3.
test_graph rmat_graph(int P, int p) {
  const edge_list edges = make_rmat({.scale = 10, .num_edges = 6000, .seed = 29});
  const csr g = build_csr(edges, {.deduplicate = false});
  std::vector<int> assignment = partition_random(g.num_rows, P, 5);
  if (P >= 3)
    for (int& a : assignment)
      if (a == P / 2) a = (a + 1) % P;
  test_graph t = make_test_graph("rmat", g, assignment, P, p);
  node_t isolated = 0, loops = 0;
  const auto out = out_degrees(t.whole);
  for (node_t i = 0; i < g.num_rows; ++i) {
    isolated += t.whole.degree(i) == 0 && out[i] == 0;
    for (node_t c : t.whole.row(i)) loops += c == i;
  }
  EXPECT(isolated > 0 && loops > 0, "R-MAT graph without isolated nodes (", isolated,
         ") or self-loops (", loops, ")");
  EXPECT(!is_symmetric(t.whole), "R-MAT graph should be directed");
  if (P >= 3) EXPECT(t.part.book.size(P / 2) == 0, "part ", P / 2, " should be empty");
  return t;
}

template <class T>
matrix<T> random_rows(node_t rows, Eigen::Index cols, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  matrix<T> m(rows, cols);
  for (Eigen::Index k = 0; k < m.size(); ++k) m.data()[k] = static_cast<T>(u(gen));
  return m;
}

template <class A, class B>
double rel_diff(const A& a, const B& b) {
  if (a.size() == 0 && b.size() == 0) return 0;
  const double scale = std::max({1.0, static_cast<double>(a.cwiseAbs().maxCoeff()),
                                 static_cast<double>(b.cwiseAbs().maxCoeff())});
  return static_cast<double>((a - b).cwiseAbs().maxCoeff()) / scale;
}

template <class T>
struct pass_result {
  matrix<T> y, dx;
  std::vector<T> grads;
};

/// Declares the layer into a fresh store initialised from a fixed seed plus jitter (so biases
/// are not zero), runs forward and backward, returns y, dx and the parameter gradients.
template <class T, class Layer, class Schedule>
pass_result<T> run_layer(Layer& layer, Schedule& graph, const layer_context& ctx,
                         const matrix<T>& x, const matrix<T>& dy) {
  parameter_store<T> store;
  layer.declare(store);
  store.allocate();
  store.initialise(41);
  std::mt19937_64 gen(43);
  std::uniform_real_distribution<double> jitter(-0.3, 0.3);
  for (T& v : store.values()) v += static_cast<T>(jitter(gen));
  pass_result<T> r;
  layer.forward(graph, ctx, x, r.y);
  r.dx = matrix<T>::Zero(x.rows(), x.cols());
  layer.backward(graph, ctx, x, r.y, dy, r.dx);
  r.grads.assign(store.grads().begin(), store.grads().end());
  return r;
}

const layer_context training_ctx{.training = true, .seed = 7, .epoch = 3, .layer = 1};

/// The layer under `Schedule` on this rank's part equals it under local_schedule on the whole
/// graph: rows of y and dx, and parameter gradients summed over the ranks.
template <class T, class Schedule, class Make>
void compare(const char* what, Make make, Schedule& dist, local_schedule& whole,
             const matrix<T>& x, const matrix<T>& dy, double tolerance) {
  if (std::getenv("SAR_TEST_VERBOSE"))
    std::fprintf(stderr, "rank %d: %s\n", the_comm->rank(), what);
  auto ref_layer = make();
  auto dist_layer = make();
  const pass_result<T> ref = run_layer<T>(ref_layer, whole, training_ctx, x, dy);
  const node_t first = dist.first_global(), n = dist.num_local();
  const matrix<T> x_local = x.middleRows(first, n), dy_local = dy.middleRows(first, n);
  pass_result<T> got = run_layer<T>(dist_layer, dist, training_ctx, x_local, dy_local);
  EXPECT(got.y.rows() == n && got.y.cols() == ref.y.cols(), what, ": y is ", got.y.rows(), " x ",
         got.y.cols());
  const double dy_err = rel_diff(got.y, ref.y.middleRows(first, n));
  const double dx_err = rel_diff(got.dx, ref.dx.middleRows(first, n));
  dist.communicator().all_reduce(std::span<T>(got.grads), reduce_op::sum);
  const Eigen::Map<const row_vector<T>> g_got(got.grads.data(), got.grads.size());
  const Eigen::Map<const row_vector<T>> g_ref(ref.grads.data(), ref.grads.size());
  const double g_err = rel_diff(g_got, g_ref);
  EXPECT(dy_err < tolerance && dx_err < tolerance && g_err < tolerance, what,
         ": relative differences y ", dy_err, ", dx ", dx_err, ", parameter gradients ", g_err,
         " (tolerance ", tolerance, ")");
  // Not vacuous: the reference moves.
  EXPECT(ref.y.cwiseAbs().maxCoeff() > T(1e-3) && ref.dx.cwiseAbs().maxCoeff() > T(1e-3), what,
         ": reference output or input gradient is all zero");
}

/// Every layer under one schedule, in one scalar type.
template <class T, class Schedule>
void check_layers(const std::string& tag, Schedule& dist, local_schedule& whole,
                  double tolerance) {
  constexpr Eigen::Index F = 12;
  const node_t N = whole.num_sources();
  const matrix<T> x = random_rows<T>(N, F, 101);
  auto name = [&](const char* layer) { return tag + " " + layer; };
  auto dy_of = [&](Eigen::Index width) { return random_rows<T>(N, width, 200 + width); };
  compare<T>(name("gcn 12->5 (weight first)").c_str(), [] { return gcn_layer<T>(F, 5); }, dist,
             whole, x, dy_of(5), tolerance);
  compare<T>(name("gcn 12->20 (aggregate first)").c_str(), [] { return gcn_layer<T>(F, 20); },
             dist, whole, x, dy_of(20), tolerance);
  compare<T>(name("sage mean 12->7").c_str(), [] { return sage_mean_layer<T>(F, 7); }, dist,
             whole, x, dy_of(7), tolerance);
  compare<T>(name("sage mean 12->20").c_str(), [] { return sage_mean_layer<T>(F, 20); }, dist,
             whole, x, dy_of(20), tolerance);
  compare<T>(name("sage gcn 12->20").c_str(), [] { return sage_gcn_layer<T>(F, 20); }, dist,
             whole, x, dy_of(20), tolerance);
  compare<T>(name("sage gcn 12->5").c_str(), [] { return sage_gcn_layer<T>(F, 5); }, dist,
             whole, x, dy_of(5), tolerance);
  compare<T>(name("sage pool 12->6").c_str(),
             [] { return sage_pool_layer<T>(F, 6, {.pool_dim = 8}); }, dist, whole, x, dy_of(6),
             tolerance);
  compare<T>(name("gat 3 heads concat, attention dropout").c_str(),
             [] { return gat_layer<T>(F, 4, {.heads = 3, .attention_dropout = 0.3}); }, dist,
             whole, x, dy_of(12), tolerance);
  compare<T>(name("gat 2 heads mean, attention dropout").c_str(),
             [] {
               return gat_layer<T>(F, 5, {.heads = 2, .merge = gat_merge::mean,
                                          .attention_dropout = 0.2});
             },
             dist, whole, x, dy_of(5), tolerance);
  compare<T>(name("batch_norm").c_str(), [] { return batch_norm<T>(F); }, dist, whole, x,
             dy_of(F), tolerance);
  compare<T>(name("dropout").c_str(), [] { return dropout<T>(F, 0.4); }, dist, whole, x,
             dy_of(F), tolerance);
}

/// The out-degree exchange, byte counts per call and the ring's live-block bound.
template <class Schedule>
void check_counters(const std::string& tag, Schedule& dist, const csr& whole) {
  const node_t first = dist.first_global(), n = dist.num_local();
  const auto truth = out_degrees(whole);
  const auto in = in_degrees(whole);
  for (node_t i = 0; i < n; ++i) {
    EXPECT(dist.out_degrees()[i] == truth[first + i], tag, ": out-degree of global ", first + i,
           " is ", dist.out_degrees()[i], ", expected ", truth[first + i]);
    EXPECT(dist.in_degrees()[i] == in[first + i], tag, ": in-degree of global ", first + i);
  }
  constexpr Eigen::Index W = 5;
  const matrixd x = random_rows<double>(n, W, 7);
  matrixd dx = matrixd::Zero(n, W);
  const auto& plan = dist.plan();
  const std::int64_t send = plan.total_send() * W * 8, recv = plan.total_recv() * W * 8;
  int blocks = 0;
  const std::int64_t comm_before = the_comm->bytes_sent();
  dist.reset_traffic();
  dist.reset_peak_live_blocks();
  dist.gather(exchange_key{}, x, [&](const graph_block&, const auto& halo) {
    ++blocks;
    EXPECT(halo.cols() == W, tag, ": halo width");
  });
  EXPECT(dist.traffic().last_call_bytes == send && dist.traffic().feature_bytes == send, tag,
         ": gather sent ", dist.traffic().last_call_bytes, " bytes, the plan says ", send);
  // What the communicator counted is the payload plus the call's small agreements.
  EXPECT(the_comm->bytes_sent() - comm_before >= send, tag, ": communicator counted less");
  dist.scatter(exchange_key{}, dx, [&](const graph_block&, auto&&) {});
  EXPECT(dist.traffic().last_call_bytes == recv, tag, ": scatter sent ",
         dist.traffic().last_call_bytes, " bytes, expected ", recv);
  const int P = the_comm->size();
  const auto* keep = dist.cache().template target<keep_for_backward>();
  if (keep != nullptr) {
    // A gather is kept: backward re-sends no features, only gradients. (The scatter above
    // started a backward pass, so this gather first drops the one kept before.)
    EXPECT(keep->kept_count() == 1, tag, ": the first gather was not kept");
    dist.gather(exchange_key{}, x, [&](const graph_block&, const auto&) {});
    EXPECT(keep->kept_count() == 1, tag, ": ", keep->kept_count(), " kept gathers");
    EXPECT(dist.kept_halo_bytes() == static_cast<std::size_t>(recv), tag, ": kept ",
           dist.kept_halo_bytes(), " bytes, expected ", recv);
    dist.gather_scatter(exchange_key{}, x, dx, [&](const graph_block&, const auto&, auto&) {});
    EXPECT(dist.traffic().last_call_bytes == recv, tag, ": gather_scatter after a kept gather "
           "sent ", dist.traffic().last_call_bytes, " bytes, expected only the gradients ", recv);
    EXPECT(keep->kept_count() == 0, tag, ": the kept halo was not consumed");
    // x changed on one rank only: every rank re-fetches (results stay exact).
    dist.gather(exchange_key{}, x, [&](const graph_block&, const auto&) {});
    matrixd x2 = x;
    if (the_comm->rank() == 0 && n > 0) x2(0, 0) += 1;  // another address anyway on rank 0
    const matrixd& changed = the_comm->rank() == 0 ? x2 : x;
    dist.gather_scatter(exchange_key{}, changed, dx, [&](const graph_block&, const auto&, auto&) {});
    EXPECT(dist.traffic().last_call_bytes == send + recv, tag, ": a gather_scatter that misses "
           "on one rank must re-fetch on all (sent ", dist.traffic().last_call_bytes, ")");
  } else {
    dist.gather_scatter(exchange_key{}, x, dx, [&](const graph_block&, const auto&, auto&) {});
    EXPECT(dist.traffic().last_call_bytes == send + recv, tag, ": gather_scatter sent ",
           dist.traffic().last_call_bytes, " bytes, expected ", send + recv);
  }
  if (keep == nullptr && !dist.transport().all_at_once) {
    const int d = dist.transport().prefetch_depth;
    const int bound = std::min(d + 1, P - 1);
    EXPECT(dist.peak_live_blocks() == bound, tag, ": peak live remote blocks ",
           dist.peak_live_blocks(), ", expected exactly min(d + 1, P - 1) = ", bound);
    EXPECT(dist.live_blocks() == 0, tag, ": blocks alive after the calls");
  }
  if (dist.transport().all_at_once)
    EXPECT(dist.peak_live_blocks() == P - 1, tag, ": one_shot holds every remote block");
  EXPECT(blocks >= 1 || n == 0 || whole.num_edges() == 0, tag, ": no block visited");
}

/// A mis-shaped argument or a throwing visitor on ONE rank ends every rank's call with an
/// exception (none waits forever), and the schedule keeps working afterwards.
template <class Schedule>
void check_errors(const std::string& tag, Schedule& dist) {
  const int p = the_comm->rank(), P = the_comm->size();
  const node_t n = dist.num_local();
  auto expect_throw_everywhere = [&](const char* what, auto&& call) {
    bool threw = false;
    try {
      call();
    } catch (const sar::error&) {
      threw = true;
    }
    EXPECT(threw, tag, ": ", what, " did not throw on rank ", p);
  };
  const matrixd good = random_rows<double>(n, 4, 9);
  const matrixd short_rows = random_rows<double>(n + 1, 4, 9);
  const matrixd wide = random_rows<double>(n, 5, 9);
  expect_throw_everywhere("wrong rows on the last rank", [&] {
    dist.gather(exchange_key{}, p == P - 1 ? short_rows : good, [](const graph_block&, const auto&) {});
  });
  if (P > 1)  // widths can only disagree between ranks
    expect_throw_everywhere("another width on rank 0", [&] {
      dist.gather(exchange_key{}, p == 0 ? wide : good, [](const graph_block&, const auto&) {});
    });
  matrixd dx = matrixd::Zero(p == 0 ? n + 2 : n, 4);
  expect_throw_everywhere("dx mis-shaped on rank 0", [&] {
    dist.gather_scatter(exchange_key{}, good, dx, [](const graph_block&, const auto&, auto&) {});
  });
  // Rank 0 has edges in every test graph, so its visitor runs.
  if (p == 0) EXPECT(dist.shard().num_edges() > 0, tag, ": rank 0 has no edges");
  expect_throw_everywhere("a visitor throwing on rank 0 only", [&] {
    dist.gather(exchange_key{}, good, [&](const graph_block&, const auto&) {
      if (p == 0) throw invalid_argument("test visitor");
    });
  });
  // Still usable: a plain exchange completes on every rank.
  matrixd dx_ok = matrixd::Zero(n, 4);
  dist.gather_scatter(exchange_key{}, good, dx_ok, [](const graph_block&, const auto&, auto&) {});
  dist.scatter(exchange_key{}, dx_ok, [](const graph_block&, auto&&) {});
}

template <class Schedule>
void check_schedule(const std::string& tag, Schedule& dist, local_schedule& whole,
                    const csr& graph) {
  check_counters(tag, dist, graph);
  check_layers<double>(tag + " double", dist, whole, 1e-10);
  check_layers<float>(tag + " float", dist, whole, 1e-5);
  check_errors(tag, dist);
  the_comm->barrier();
}

void check_graph(const test_graph& g) {
  local_schedule whole(g.whole);
  const int p = the_comm->rank();
  {
    // Built from the graph_part (the schedule owns shard and plan).
    distributed_schedule<mpi_communicator> seq(*the_comm, g.part);
    check_schedule(g.name + " sequential d=1", seq, whole, g.whole);
  }
  const graph_shard shard(g.part);
  const halo_plan plan = build_halo_plan(*the_comm, shard);
  for (int d : {0, 2}) {
    distributed_schedule<mpi_communicator> seq(*the_comm, shard, plan, sequential_exchange(d));
    check_counters(g.name + " sequential d=" + std::to_string(d), seq, g.whole);
    check_layers<double>(g.name + " sequential d=" + std::to_string(d), seq, whole, 1e-10);
  }
  {
    distributed_schedule<mpi_communicator> keep(*the_comm, shard, plan, keep_halo_exchange());
    check_schedule(g.name + " keep_halo", keep, whole, g.whole);
  }
  {
    distributed_schedule<mpi_communicator> one(*the_comm, shard, plan, one_shot_exchange());
    check_schedule(g.name + " one_shot", one, whole, g.whole);
  }
  if (p == 0) std::printf("%s: every schedule matches local_schedule\n", g.name.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  mpi_environment env(argc, argv);
  // Up to 4 ranks share 2 cores: one thread each keeps the run short.
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, 1);
  mpi_communicator comm;
  the_comm = &comm;
  const int p = comm.rank(), P = comm.size();

  // A wrong plan on one rank ends every rank with an exception at construction.
  {
    const test_graph g = rmat_graph(P, p);
    const graph_shard shard(g.part);
    halo_plan plan = build_halo_plan(comm, shard);
    if (p == P - 1) plan.recv_count[p] = 1;  // the plan receives from itself
    bool threw = false;
    try {
      distributed_schedule<mpi_communicator> bad(comm, shard, plan);
    } catch (const sar::error&) {
      threw = true;
    }
    EXPECT(threw, "an invalid plan on rank ", P - 1, " did not throw on rank ", p);
    bool bad_depth = false;
    try {
      distributed_schedule<mpi_communicator> bad(comm, shard, build_halo_plan(comm, shard),
                                                 sequential_exchange(p == 0 ? -1 : 1));
    } catch (const sar::error&) {
      bad_depth = true;
    }
    EXPECT(bad_depth, "a negative prefetch depth on rank 0 did not throw on rank ", p);
  }

  check_graph(cora_graph(P, p));
  // R-MAT with every message chunked (exercises the communicator's splitting of long
  // messages in isend/irecv and the pairwise fallback of all_to_all_v).
  comm.set_max_message_elements(97);
  check_graph(rmat_graph(P, p));
  comm.set_max_message_elements(INT_MAX);

  // P = 1 without MPI: the serial communicator runs the same schedules on the whole graph.
  {
    const test_graph g = cora_graph(1, 0);
    serial_communicator serial;
    local_schedule whole(g.whole);
    distributed_schedule<serial_communicator> seq(serial, g.part);
    distributed_schedule<serial_communicator> one(serial, g.part, one_shot_exchange());
    check_layers<double>("serial sequential", seq, whole, 1e-10);
    check_layers<double>("serial one_shot", one, whole, 1e-10);
    EXPECT(seq.traffic().total_bytes() == 0, "the serial schedule sent bytes");
  }
  comm.barrier();
  if (p == 0) std::printf("mpi-schedules: all checks passed on %d ranks\n", P);
  return 0;
}
