// One idea: a simulation code trains a GNN surrogate of its own solver on its own distributed
// mesh, then runs its time loop with the surrogate in place of the solver (MeshGraphNets,
// Pfaff et al. 2021: encode, process with messages over edge features, decode).
//
// The host builds an unstructured triangle mesh of the unit square (a grid of --cells x
// --cells cells with perturbed interior vertices, each cell cut along a random diagonal),
// owns it in strips of vertex rows over its ranks and runs explicit diffusion on it:
//   u_i <- u_i + sum_j alpha h^2 / |x_j - x_i|^2 (u_j - u_i)   (interior vertices; u = 0 on
//                                                             the boundary)
// with its own halo exchange of neighbour rows. It records trajectories from random initial
// bumps and hands sar, for each (u_t, u_t+1) pair, its communicator, its strips (a
// sar::graph_part: no partitioner runs, nothing is relabelled) with edge features
// (x_j - x_i) / h and |x_j - x_i| / h on each in-edge, node features (u / scale, boundary
// flag) and the target (u_t+1 - u_t) / scale. The model: a linear encoder, an edge_processor
// (message-passing steps carrying an edge state), a linear decoder. Trained, it replaces the
// solver: u_t+1 = u_t + its prediction, for --rollout steps of held-out trajectories. It
// reports the one-step relative L2 error on held-out steps and the rollout's relative L2
// error at the last step, each next to persistence (u_t+1 = u_t), and fails (exit 1) above
// --max-one-step / --max-rollout. Training is exact across rank counts: 1 or 4 ranks train
// the same model up to float rounding. Adam's learning rate decays exponentially to a 20th.
//
//   mpirun -np 4 build/examples/mesh-surrogate --cells 24
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "sar/comm/mpi.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/sar.hpp"

#include <mpi.h>  // the host's own MPI calls (the C API: sar/comm/mpi.hpp skips the C++ one)

namespace {

/// The run's settings (--help lists them).
struct settings {
  int cells = 24;            // cells per side
  int train_trajectories = 4;
  int test_trajectories = 2;
  int steps = 20;            // recorded steps per trajectory
  int rollout = 20;          // surrogate steps on held-out trajectories
  int epochs = 120;
  int hidden = 32;
  int message_steps = 1;
  double learning_rate = 3e-3;
  double max_one_step = 0.02, max_rollout = 0.10;
};

constexpr double kAlpha = 0.1;    // diffusion number per unit edge length
constexpr double kJitter = 0.15;  // vertex perturbation, in cells

/// A deterministic number in [0, 1) from (a, b): the mesh and the initial conditions are
/// the same on every rank and for every rank count.
double hash01(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E5ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<double>((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

/// The host's mesh: vertex id = row * (cells + 1) + column; rows [first_row, end_row) are
/// this rank's strip.
struct mesh {
  int cells = 0, rank = 0, ranks = 1;
  long first_row = 0, end_row = 0;

  long side() const { return cells + 1; }
  long id(long row, long col) const { return row * side() + col; }
  double h() const { return 1.0 / cells; }
  bool boundary(long v) const {
    const long r = v / side(), c = v % side();
    return r == 0 || c == 0 || r == cells || c == cells;
  }
  /// Position of vertex v (interior vertices jittered).
  std::array<double, 2> position(long v) const {
    const long r = v / side(), c = v % side();
    double x = c * h(), y = r * h();
    if (!boundary(v)) {
      x += kJitter * h() * (2 * hash01(v, 1) - 1);
      y += kJitter * h() * (2 * hash01(v, 2) - 1);
    }
    return {x, y};
  }
  /// Whether cell (r, c) is cut from its lower-left to its upper-right corner.
  bool rising_diagonal(long r, long c) const { return hash01(r * cells + c, 3) < 0.5; }
  /// The mesh neighbours of vertex (r, c), sorted by id.
  std::vector<long> neighbours(long r, long c) const {
    std::vector<long> out;
    auto add = [&](long rr, long cc) {
      if (rr >= 0 && cc >= 0 && rr <= cells && cc <= cells) out.push_back(id(rr, cc));
    };
    add(r - 1, c), add(r + 1, c), add(r, c - 1), add(r, c + 1);
    // Diagonals of the four cells around the vertex that touch it.
    if (r > 0 && c > 0 && rising_diagonal(r - 1, c - 1)) add(r - 1, c - 1);
    if (r > 0 && c < cells && !rising_diagonal(r - 1, c)) add(r - 1, c + 1);
    if (r < cells && c > 0 && !rising_diagonal(r, c - 1)) add(r + 1, c - 1);
    if (r < cells && c < cells && rising_diagonal(r, c)) add(r + 1, c + 1);
    std::sort(out.begin(), out.end());
    return out;
  }
  long num_local() const { return (end_row - first_row) * side(); }
  long first_vertex() const { return first_row * side(); }
};

/// The host's solver state on one rank: its strip's values and one halo row on each side.
struct diffusion {
  const mesh& m;
  std::vector<double> u;                 // this strip, num_local()
  std::vector<double> above, below;      // the neighbour strips' adjacent rows
  MPI_Comm comm;

  double value(long v) const {
    const long r = v / m.side(), c = v % m.side();
    if (r < m.first_row) return above[c];
    if (r >= m.end_row) return below[c];
    return u[v - m.first_vertex()];
  }
  /// The host's own halo exchange (rows first_row - 1 and end_row).
  void exchange() {
    const int up = m.rank > 0 ? m.rank - 1 : MPI_PROC_NULL;
    const int down = m.rank + 1 < m.ranks ? m.rank + 1 : MPI_PROC_NULL;
    const int side = static_cast<int>(m.side());
    above.assign(side, 0.0);
    below.assign(side, 0.0);
    MPI_Sendrecv(u.data(), side, MPI_DOUBLE, up, 0, below.data(), side, MPI_DOUBLE, down, 0,
                 comm, MPI_STATUS_IGNORE);
    MPI_Sendrecv(u.data() + u.size() - side, side, MPI_DOUBLE, down, 1, above.data(), side,
                 MPI_DOUBLE, up, 1, comm, MPI_STATUS_IGNORE);
  }
  /// One explicit step of the solver.
  void step() {
    exchange();
    std::vector<double> next(u.size());
    for (long k = 0; k < m.num_local(); ++k) {
      const long v = m.first_vertex() + k;
      if (m.boundary(v)) continue;  // stays 0
      const auto p = m.position(v);
      double change = 0;
      for (long j : m.neighbours(v / m.side(), v % m.side())) {
        const auto q = m.position(j);
        const double d2 = (q[0] - p[0]) * (q[0] - p[0]) + (q[1] - p[1]) * (q[1] - p[1]);
        change += kAlpha * m.h() * m.h() / d2 * (value(j) - u[k]);
      }
      next[k] = u[k] + change;
    }
    u = std::move(next);
  }
  /// Initial condition of trajectory `t`: four Gaussian bumps of random sign, place and width.
  void start(int t) {
    u.assign(m.num_local(), 0.0);
    for (long k = 0; k < m.num_local(); ++k) {
      const long v = m.first_vertex() + k;
      if (m.boundary(v)) continue;
      const auto p = m.position(v);
      for (int b = 0; b < 4; ++b) {
        const double cx = 0.2 + 0.6 * hash01(t, 10 + b), cy = 0.2 + 0.6 * hash01(t, 20 + b);
        const double width = (2.5 + 3 * hash01(t, 30 + b)) * m.h();
        const double sign = hash01(t, 40 + b) < 0.5 ? -1 : 1;
        const double d2 = (p[0] - cx) * (p[0] - cx) + (p[1] - cy) * (p[1] - cy);
        u[k] += sign * std::exp(-d2 / (2 * width * width));
      }
    }
  }
};

/// The host's strip as sar's part: in-edges of its vertices with their edge features.
sar::graph_part strip_as_part(const mesh& m) {
  sar::graph_part part;
  part.part = m.rank;
  std::vector<sar::node_t> offsets;
  for (int q = 0; q <= m.ranks; ++q)
    offsets.push_back((static_cast<long>(m.cells + 1) * q / m.ranks) * m.side());
  part.book = sar::partition_book(offsets);
  sar::csr& g = part.in_edges;
  g.num_rows = m.num_local();
  g.num_cols = part.book.num_nodes();
  std::vector<float> edge_rows;
  for (long k = 0; k < m.num_local(); ++k) {
    const long v = m.first_vertex() + k;
    const auto p = m.position(v);
    for (long j : m.neighbours(v / m.side(), v % m.side())) {
      g.columns.push_back(j);
      const auto q = m.position(j);
      const double dx = (q[0] - p[0]) / m.h(), dy = (q[1] - p[1]) / m.h();
      edge_rows.insert(edge_rows.end(), {float(dx), float(dy), float(std::hypot(dx, dy))});
    }
    g.offsets.push_back(static_cast<sar::edge_t>(g.columns.size()));
  }
  part.edge_features = Eigen::Map<const sar::matrixf>(
      edge_rows.data(), static_cast<Eigen::Index>(edge_rows.size() / 3), 3);
  part.features.resize(m.num_local(), 0);
  part.original_ids.resize(m.num_local());
  std::iota(part.original_ids.begin(), part.original_ids.end(), m.first_vertex());
  return part;
}

/// One recorded step: the state before and after, on this rank's vertices.
struct sample {
  std::vector<double> before, after;
};

using schedule = sar::distributed_schedule<sar::mpi_communicator>;
using model_type = sar::sequential<sar::linear<float>, sar::relu<float>,
                                   sar::edge_processor<float>, sar::linear<float>>;

/// The sums of squares of a and of a - b over every rank's vertices.
std::pair<double, double> squares(sar::mpi_communicator& comm, const std::vector<double>& a,
                                  const std::vector<double>& b) {
  double sums[2] = {0, 0};
  for (std::size_t k = 0; k < a.size(); ++k) {
    sums[0] += a[k] * a[k];
    sums[1] += (a[k] - b[k]) * (a[k] - b[k]);
  }
  comm.all_reduce(std::span<double>(sums, 2), sar::reduce_op::sum);
  return {sums[0], sums[1]};
}

int run(const settings& s) {
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (world_size > s.cells + 1) {
    if (world_rank == 0)
      std::fprintf(stderr, "mesh-surrogate: %d ranks for %d vertex rows: at most one rank per "
                           "row\n", world_size, s.cells + 1);
    return 1;
  }
  mesh m{.cells = s.cells, .rank = world_rank, .ranks = world_size};
  m.first_row = static_cast<long>(s.cells + 1) * world_rank / world_size;
  m.end_row = static_cast<long>(s.cells + 1) * (world_rank + 1) / world_size;
  sar::mpi_communicator comm(MPI_COMM_WORLD);

  // 1. The host records its solver's trajectories.
  diffusion solver{m, {}, {}, {}, MPI_COMM_WORLD};
  std::vector<std::vector<sample>> trajectories;
  for (int t = 0; t < s.train_trajectories + s.test_trajectories; ++t) {
    solver.start(t);
    auto& samples = trajectories.emplace_back();
    for (int k = 0; k < std::max(s.steps, s.rollout); ++k) {
      sample pair{solver.u, {}};
      solver.step();
      pair.after = solver.u;
      samples.push_back(std::move(pair));
    }
  }
  // Scales over the training steps (every rank's vertices): of u and of one step's change.
  double sums[3] = {0, 0, 0};
  for (int t = 0; t < s.train_trajectories; ++t)
    for (int k = 0; k < s.steps; ++k)
      for (std::size_t i = 0; i < trajectories[t][k].before.size(); ++i) {
        const sample& p = trajectories[t][k];
        sums[0] += p.before[i] * p.before[i];
        sums[1] += (p.after[i] - p.before[i]) * (p.after[i] - p.before[i]);
        sums[2] += 1;
      }
  comm.all_reduce(std::span<double>(sums, 3), sar::reduce_op::sum);
  const double u_scale = std::sqrt(sums[0] / sums[2]), change_scale = std::sqrt(sums[1] / sums[2]);

  // 2. sar sees the host's strips, its features and its targets.
  schedule graph(comm, strip_as_part(m));
  const long n = m.num_local();
  auto features = [&](const std::vector<double>& u) {
    sar::matrixf x(n, 2);
    for (long k = 0; k < n; ++k)
      x.row(k) << float(u[k] / u_scale), float(m.boundary(m.first_vertex() + k));
    return x;
  };
  const Eigen::Index h = s.hidden;
  model_type model(sar::linear<float>(2, h), sar::relu<float>(h),
                   sar::edge_processor<float>(h, 3, h, s.message_steps, sar::message_aggregation::sum), sar::linear<float>(h, 1));
  model.initialise(7);
  sar::adam<float> optimiser({.learning_rate = s.learning_rate});
  double interior = 0;
  for (long k = 0; k < n; ++k) interior += !m.boundary(m.first_vertex() + k);
  comm.all_reduce(std::span<double>(&interior, 1), sar::reduce_op::sum);

  // 3. Training: one Adam step per recorded step, in an order drawn per epoch (the same on
  //    every rank); mean squared error of the scaled change over the interior vertices.
  std::vector<std::pair<int, int>> order;
  for (int t = 0; t < s.train_trajectories; ++t)
    for (int k = 0; k < s.steps; ++k) order.emplace_back(t, k);
  sar::matrixf dpred(n, 1);
  for (int epoch = 0; epoch < s.epochs; ++epoch) {
    // The learning rate decays exponentially to a 20th over the run.
    optimiser.set_learning_rate(s.learning_rate * std::pow(0.05, double(epoch) / s.epochs));
    for (std::size_t a = order.size(); a > 1; --a)  // Fisher-Yates keyed by (epoch, a)
      std::swap(order[a - 1], order[static_cast<std::size_t>(hash01(epoch, a) * a)]);
    double loss = 0;
    for (const auto& [t, k] : order) {
      const sample& p = trajectories[t][k];
      const sar::layer_context ctx{.training = true, .epoch = static_cast<std::uint64_t>(epoch)};
      const sar::matrixf x = features(p.before);  // read again by backward: kept alive
      const sar::matrixf& pred = model.forward(graph, ctx, x);
      for (long i = 0; i < n; ++i) {
        const double target = (p.after[i] - p.before[i]) / change_scale;
        const double err = m.boundary(m.first_vertex() + i) ? 0.0 : pred(i, 0) - target;
        loss += err * err / interior;
        dpred(i, 0) = static_cast<float>(2 * err / interior);
      }
      model.backward(graph, ctx, dpred);
      graph.all_reduce_sum(model.parameters().grads());
      optimiser.step(model.parameters());
    }
    comm.all_reduce(std::span<double>(&loss, 1), sar::reduce_op::sum);
    if (world_rank == 0 && (epoch % 20 == 0 || epoch + 1 == s.epochs))
      std::printf("epoch %4d  training loss %.7g\n", epoch, loss / order.size());
  }

  // 4. The surrogate in the host's time loop, on held-out trajectories.
  const sar::layer_context evaluation{.training = false};
  auto surrogate_step = [&](const std::vector<double>& u) {
    const sar::matrixf x = features(u);
    const sar::matrixf& pred = model.forward(graph, evaluation, x);
    std::vector<double> next(u);
    for (long i = 0; i < n; ++i)
      if (!m.boundary(m.first_vertex() + i)) next[i] += change_scale * pred(i, 0);
    return next;
  };
  double one_step[3] = {0, 0, 0}, rollout[3] = {0, 0, 0};  // |truth|^2, |model|^2, |persist|^2
  for (int t = s.train_trajectories; t < s.train_trajectories + s.test_trajectories; ++t) {
    for (int k = 0; k < s.steps; ++k) {
      const sample& p = trajectories[t][k];
      const auto [truth, model_error] = squares(comm, p.after, surrogate_step(p.before));
      one_step[0] += truth, one_step[1] += model_error;
      one_step[2] += squares(comm, p.after, p.before).second;
    }
    std::vector<double> u = trajectories[t][0].before;
    for (int k = 0; k < s.rollout; ++k) u = surrogate_step(u);
    const sample& last = trajectories[t][s.rollout - 1];
    const auto [truth, model_error] = squares(comm, last.after, u);
    rollout[0] += truth, rollout[1] += model_error;
    rollout[2] += squares(comm, last.after, trajectories[t][0].before).second;
  }
  const double one_step_error = std::sqrt(one_step[1] / one_step[0]);
  const double rollout_error = std::sqrt(rollout[1] / rollout[0]);
  const bool ok = one_step_error <= s.max_one_step && rollout_error <= s.max_rollout;
  if (world_rank == 0) {
    std::printf("mesh %dx%d cells, %ld vertices, %d ranks, %d message steps, hidden %d\n",
                s.cells, s.cells, static_cast<long>(graph.num_global()), world_size,
                s.message_steps, s.hidden);
    std::printf("one-step relative L2 error %.5f (persistence %.5f)\n", one_step_error,
                std::sqrt(one_step[2] / one_step[0]));
    std::printf("rollout relative L2 error after %d steps %.5f (persistence %.5f)\n", s.rollout,
                rollout_error, std::sqrt(rollout[2] / rollout[0]));
    std::printf("mesh-surrogate: %s\n", ok ? "ok" : "FAILED (error above the bound)");
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  CLI::App app("mesh-surrogate: a host's diffusion solver on its distributed triangle mesh, "
               "replaced by a trained message-passing surrogate (run under mpirun)",
               "mesh-surrogate");
  app.add_option("--cells", s.cells, "cells per side of the mesh")
      ->check(CLI::Range(2, 4096))->capture_default_str();
  app.add_option("--train-trajectories", s.train_trajectories, "trajectories to train on")
      ->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--test-trajectories", s.test_trajectories, "held-out trajectories")
      ->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--steps", s.steps, "recorded steps per trajectory")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--rollout", s.rollout, "surrogate steps in place of the solver")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--epochs", s.epochs, "passes over the training steps")
      ->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--hidden", s.hidden, "width of the latent node and edge state")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--message-steps", s.message_steps, "message-passing steps of the processor")
      ->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--learning-rate", s.learning_rate, "Adam's learning rate")
      ->check(CLI::Range(1e-8, 10.0))->capture_default_str();
  app.add_option("--max-one-step", s.max_one_step, "fail above this one-step error")
      ->capture_default_str();
  app.add_option("--max-rollout", s.max_rollout, "fail above this rollout error")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  MPI_Init(&argc, &argv);
  int status = 1;
  try {
    status = run(s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mesh-surrogate: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
