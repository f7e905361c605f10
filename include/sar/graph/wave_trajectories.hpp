// A generator of trajectory datasets (sar/graph/trajectories.hpp) for tests and benchmarks:
// waves in a channel around a random circular obstacle, each trajectory on its own jittered
// triangle mesh, solved by our own small finite-element solver.
//
// The mesh: the channel [0, 2] x [0, 1] as a grid of h = 1 / cells_across squares whose
// points move by up to 0.2 h (boundary points along their side only), each square cut along
// its shorter diagonal; the points within a circle (centre in [0.6, 1.4] x [0.35, 0.65],
// radius in [0.1, 0.2]) are removed with their triangles. Node types (DeepMind's codes): the
// left side inflow (4), the other sides and the obstacle's rim wall boundary (6), the rest
// normal (0).
// The physics: the wave equation u_tt = c^2 Laplace(u) with linear elements and a lumped mass
// (M u_tt = -c^2 K u, K the cotangent stiffness), stepped by symplectic Euler (v += dt M^-1 f,
// u += dt v) with `substeps` steps per stored step. Walls hold u = v = 0; the inflow drives
// u = A sin(w t). The start: a Gaussian pulse at a random point, at rest.
// Stored dynamic fields: "displacement" u and "velocity" v (1 column each), so a state is
// Markov: the next state is a function of this one, which a surrogate learns.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/trajectories.hpp"

namespace sar {

/// Settings of the wave trajectories.
struct wave_trajectory_options {
  int cells_across = 12;     ///< mesh squares across the channel's height (twice that along)
  int steps = 60;            ///< stored steps per trajectory
  double dt = 0.05;          ///< time between stored steps
  int substeps = 4;          ///< solver steps per stored step
  double wave_speed = 1.0;   ///< c
};

/// Settings of a generated dataset: its trajectories per split and its seed.
struct wave_dataset_options {
  wave_trajectory_options trajectory{};  ///< every trajectory's
  int train = 20;           ///< trajectories trained on
  int valid = 2;            ///< trajectories for validation
  int test = 4;             ///< trajectories reported
  std::uint64_t seed = 1;   ///< keys every mesh and start
};

/// The fields of a wave dataset of `o`.
inline trajectory_fields wave_fields(const wave_trajectory_options& o) {
  trajectory_fields f;
  f.dynamic = {"displacement", "velocity"};
  f.dynamic_widths = {1, 1};
  f.dimensions = 2;
  f.corners = 3;
  f.length = o.steps;
  f.dt = o.dt;
  return f;
}

/// Trajectory `index` of the family `seed` (see the top of this file), named `name`, its
/// graph connected. Throws sar::invalid_argument for cells_across < 4, steps < 2, dt <= 0,
/// substeps < 1 or wave_speed <= 0, or a solver step past the explicit scheme's stability limit
/// (the fields blow up).
inline trajectory make_wave_trajectory(const wave_trajectory_options& o, std::uint64_t seed,
                                       std::uint64_t index, std::string name) {
  constexpr const char* where = "sar::make_wave_trajectory";
  SAR_CHECK(o.cells_across >= 4 && o.steps >= 2 && o.dt > 0 && o.substeps >= 1 &&
                o.wave_speed > 0,
            invalid_argument, where, ": cells_across ", o.cells_across, ", steps ", o.steps,
            ", dt ", o.dt, ", substeps ", o.substeps, ", wave speed ", o.wave_speed);
  const counter_rng rng(seed, rng_stream::generator_features, 0x57415645 + index);
  std::uint64_t draw = 0;
  const auto uniform = [&](double lo, double hi) { return lo + (hi - lo) * rng.uniform(draw++); };
  const int ny = o.cells_across, nx = 2 * ny;
  const double h = 1.0 / ny;
  const double cx = uniform(0.6, 1.4), cy = uniform(0.35, 0.65), radius = uniform(0.1, 0.2);

  // The grid's points, jittered; those in the obstacle removed (id -1).
  const auto grid = [&](int i, int j) { return j * (nx + 1) + i; };
  std::vector<std::array<double, 2>> points((nx + 1) * (ny + 1));
  std::vector<node_t> id(points.size(), -1);
  std::vector<mesh_node> side(points.size(), mesh_node::normal);  // the outer boundary's type
  for (int j = 0; j <= ny; ++j)
    for (int i = 0; i <= nx; ++i) {
      const double jx = uniform(-0.2, 0.2) * h, jy = uniform(-0.2, 0.2) * h;
      const bool side_x = i == 0 || i == nx, side_y = j == 0 || j == ny;
      points[grid(i, j)] = {i * h + (side_x ? 0.0 : jx), j * h + (side_y ? 0.0 : jy)};
      side[grid(i, j)] = side_y || i == nx ? mesh_node::wall_boundary
                         : i == 0         ? mesh_node::inflow
                                          : mesh_node::normal;
    }
  const auto inside = [&](const std::array<double, 2>& p) {
    return std::hypot(p[0] - cx, p[1] - cy) < radius;
  };
  // Triangles of kept points; a point of a triangle that lost a corner lies on the rim.
  std::vector<std::array<int, 3>> triangles;
  std::vector<char> rim(points.size(), 0), used(points.size(), 0);
  for (int j = 0; j < ny; ++j)
    for (int i = 0; i < nx; ++i) {
      const int a = grid(i, j), b = grid(i + 1, j), c = grid(i + 1, j + 1), d = grid(i, j + 1);
      const auto dist = [&](int p, int q) {
        return std::hypot(points[p][0] - points[q][0], points[p][1] - points[q][1]);
      };
      const bool ac = dist(a, c) <= dist(b, d);
      for (const auto& t : ac ? std::array<std::array<int, 3>, 2>{{{a, b, c}, {a, c, d}}}
                              : std::array<std::array<int, 3>, 2>{{{a, b, d}, {b, c, d}}}) {
        const bool lost = inside(points[t[0]]) || inside(points[t[1]]) || inside(points[t[2]]);
        for (const int p : t) (lost ? rim : used)[p] = 1;
        if (!lost) triangles.push_back(t);
      }
    }
  trajectory traj;
  traj.name = std::move(name);
  std::vector<int> kept;
  for (std::size_t p = 0; p < points.size(); ++p)
    if (used[p] && !inside(points[p])) {
      id[p] = static_cast<node_t>(kept.size());
      kept.push_back(static_cast<int>(p));
    }
  const auto n = static_cast<Eigen::Index>(kept.size());
  traj.mesh_pos.resize(n, 2);
  traj.node_type.resize(static_cast<std::size_t>(n));
  for (Eigen::Index v = 0; v < n; ++v) {
    const auto& p = points[kept[v]];
    traj.mesh_pos(v, 0) = static_cast<float>(p[0]);
    traj.mesh_pos(v, 1) = static_cast<float>(p[1]);
    traj.node_type[v] = static_cast<std::int32_t>(rim[kept[v]] ? mesh_node::wall_boundary
                                                                 : side[kept[v]]);
  }
  for (const auto& t : triangles)
    for (const int p : t) traj.cells.push_back(static_cast<std::int32_t>(id[p]));

  // Lumped masses and cotangent weights (w_ab = (cot of the angles facing a-b) / 2).
  std::vector<double> mass(static_cast<std::size_t>(n), 0.0);
  std::vector<std::array<double, 3>> weights;  // (a, b, w) per triangle edge
  for (std::size_t t = 0; t < traj.cells.size(); t += 3) {
    const std::array<Eigen::Index, 3> v{traj.cells[t], traj.cells[t + 1], traj.cells[t + 2]};
    const auto x = [&](int k, int c) { return static_cast<double>(traj.mesh_pos(v[k], c)); };
    const double area =
        0.5 * std::abs((x(1, 0) - x(0, 0)) * (x(2, 1) - x(0, 1)) -
                       (x(2, 0) - x(0, 0)) * (x(1, 1) - x(0, 1)));
    for (int k = 0; k < 3; ++k) {
      mass[v[k]] += area / 3;
      const int a = (k + 1) % 3, b = (k + 2) % 3;  // the edge facing corner k
      const double ux = x(a, 0) - x(k, 0), uy = x(a, 1) - x(k, 1);
      const double wx = x(b, 0) - x(k, 0), wy = x(b, 1) - x(k, 1);
      const double cot = (ux * wx + uy * wy) / std::abs(ux * wy - uy * wx);
      weights.push_back({static_cast<double>(v[a]), static_cast<double>(v[b]), cot / 2});
    }
  }

  // The start and the drive.
  const double px = uniform(0.2, 1.8), py = uniform(0.2, 0.8), amplitude = uniform(0.5, 1.0);
  const double drive = uniform(0.1, 0.4), omega = 2 * 3.141592653589793 * uniform(0.4, 1.0);
  std::vector<double> u(static_cast<std::size_t>(n)), v(u.size(), 0.0), force(u.size());
  for (Eigen::Index k = 0; k < n; ++k) {
    const double dx = traj.mesh_pos(k, 0) - px, dy = traj.mesh_pos(k, 1) - py;
    u[k] = amplitude * std::exp(-(dx * dx + dy * dy) / (2 * 0.15 * 0.15));
  }
  const auto hold = [&](double time) {
    for (Eigen::Index k = 0; k < n; ++k) {
      const auto type = static_cast<mesh_node>(traj.node_type[k]);
      if (type == mesh_node::wall_boundary) u[k] = v[k] = 0;
      if (type == mesh_node::inflow) {
        u[k] = drive * std::sin(omega * time);
        v[k] = drive * omega * std::cos(omega * time);
      }
    }
  };
  const auto store = [&] {
    matrixf s(n, 2);
    for (Eigen::Index k = 0; k < n; ++k) {
      s(k, 0) = static_cast<float>(u[k]);
      s(k, 1) = static_cast<float>(v[k]);
    }
    traj.states.push_back(std::move(s));
  };
  hold(0);
  store();
  const double step = o.dt / o.substeps, c2 = o.wave_speed * o.wave_speed;
  for (int s = 1; s < o.steps; ++s) {
    for (int k = 0; k < o.substeps; ++k) {
      std::fill(force.begin(), force.end(), 0.0);
      for (const auto& [a, b, w] : weights) {  // -K u
        const auto ia = static_cast<std::size_t>(a), ib = static_cast<std::size_t>(b);
        force[ia] -= w * (u[ia] - u[ib]);
        force[ib] -= w * (u[ib] - u[ia]);
      }
      for (std::size_t p = 0; p < u.size(); ++p) v[p] += step * c2 * force[p] / mass[p];
      for (std::size_t p = 0; p < u.size(); ++p) u[p] += step * v[p];
      hold(((s - 1) * o.substeps + k + 1) * step);
    }
    for (std::size_t p = 0; p < u.size(); ++p)
      SAR_CHECK(std::isfinite(u[p]) && std::abs(u[p]) < 1e3, invalid_argument, where,
                ": the solution blew up at step ", s, " (dt / substeps = ", step,
                " is past the stability limit of cells_across = ", o.cells_across,
                "; raise substeps)");
    store();
  }
  traj.connect(3);
  return traj;
}

/// A dataset of `o`: trajectories named "train/traj_0000", ... (trajectory k of the dataset's
/// seed, counting train, then valid, then test). Throws as make_wave_trajectory does, or for a
/// negative count or no training trajectory.
inline trajectory_dataset make_wave_dataset(const wave_dataset_options& o) {
  SAR_CHECK(o.train >= 1 && o.valid >= 0 && o.test >= 0, invalid_argument,
            "sar::make_wave_dataset: ", o.train, " training, ", o.valid, " validation and ",
            o.test, " test trajectories");
  trajectory_dataset d;
  d.name = "waves";
  d.fields = wave_fields(o.trajectory);
  std::uint64_t index = 0;
  for (auto [split, count, list] : {std::tuple{"train", o.train, &d.train},
                                    std::tuple{"valid", o.valid, &d.valid},
                                    std::tuple{"test", o.test, &d.test}})
    for (int k = 0; k < count; ++k) {
      char name[32];
      std::snprintf(name, sizeof name, "%s/traj_%04d", split, k);
      list->push_back(make_wave_trajectory(o.trajectory, o.seed, index++, name));
    }
  return d;
}

}  // namespace sar
