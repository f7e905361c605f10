// Simulation trajectories on meshes, as MeshGraphNets (Pfaff et al., ICLR 2021) and NVIDIA
// PhysicsNeMo train on them: each trajectory its own mesh (node positions, cells, a type per
// node) and, per time step, the values of its dynamic fields at every node. The model's graph
// is the mesh's: every two corners of a cell joined both ways (mesh_graph), each edge carrying
// the relative position of its source and the distance (mesh_edge_features).
// The files: sar/graph/io/trajectories.hpp; a generator: sar/graph/wave_trajectories.hpp;
// training: sar/train/mesh_surrogate.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/csr.hpp"

namespace sar {

/// DeepMind's node types (MeshGraphNets' common.NodeType): the codes a `node_type` field holds.
enum class mesh_node : std::int32_t {
  normal = 0,
  obstacle = 1,
  airfoil = 2,
  handle = 3,
  inflow = 4,
  outflow = 5,
  wall_boundary = 6,
};
/// The number of codes (NodeType.SIZE): types are in [0, mesh_node_types) and one-hot this wide.
inline constexpr std::int32_t mesh_node_types = 9;

/// Whether a model predicts a node of type `code` (normal and outflow nodes, MeshGraphNets'
/// loss mask); every other node is held to its known values.
constexpr bool is_predicted_node(std::int32_t code) {
  return code == static_cast<std::int32_t>(mesh_node::normal) ||
         code == static_cast<std::int32_t>(mesh_node::outflow);
}

/// The fields every trajectory of a dataset has (DeepMind's meta.json).
struct trajectory_fields {
  /// The dynamic fields in order (a state row is their values side by side) and their widths.
  std::vector<std::string> dynamic;
  std::vector<Eigen::Index> dynamic_widths;  ///< per dynamic field
  /// The static float fields besides mesh_pos (node inputs that do not change) and widths.
  std::vector<std::string> static_inputs;
  std::vector<Eigen::Index> static_widths;  ///< per static input
  Eigen::Index dimensions = 2;  ///< mesh_pos's width: 2 or 3
  int corners = 3;              ///< cells' width: 3 (triangles) or 4 (tetrahedra)
  int length = 0;               ///< steps per trajectory (trajectory_length)
  double dt = 0;                ///< time between steps

  /// Columns of a state (the dynamic fields' widths summed).
  Eigen::Index state_width() const { return sum(dynamic_widths); }
  /// Columns of the static inputs.
  Eigen::Index static_width() const { return sum(static_widths); }

 private:
  static Eigen::Index sum(const std::vector<Eigen::Index>& w) {
    Eigen::Index s = 0;
    for (const Eigen::Index x : w) s += x;
    return s;
  }
};

/// One trajectory: a mesh and its states.
struct trajectory {
  std::string name;                     ///< "train/traj_0003": what messages and outputs call it
  matrixf mesh_pos;                     ///< N x dimensions
  std::vector<std::int32_t> cells;      ///< C x corners, row-major, node ids
  std::vector<std::int32_t> node_type;  ///< N codes (mesh_node)
  matrixf static_inputs;                ///< N x static_width (0 columns: none)
  std::vector<matrixf> states;          ///< one per step: N x state_width
  csr graph;                            ///< mesh_graph of the cells (connect())
  matrixf edge_features;                ///< mesh_edge_features of graph (connect())

  /// Number of nodes.
  node_t num_nodes() const { return static_cast<node_t>(mesh_pos.rows()); }
  /// Number of steps.
  int num_steps() const { return static_cast<int>(states.size()); }
  /// Builds graph and edge_features from the cells and positions.
  void connect(int corners);
};

/// A trajectory dataset: its fields and its splits.
struct trajectory_dataset {
  std::string name;             ///< what it is called (its directory's name)
  trajectory_fields fields;     ///< what every trajectory has
  std::vector<trajectory> train;  ///< trained on
  std::vector<trajectory> valid;  ///< evaluated while training
  std::vector<trajectory> test;   ///< reported

  /// The trajectories of the split named `split` ("train", "valid" or "test"). Throws
  /// sar::invalid_argument for another name.
  std::vector<trajectory>& split(std::string_view split) {
    SAR_CHECK(split == "train" || split == "valid" || split == "test", invalid_argument,
              "sar::trajectory_dataset: no split '", split, "' (train, valid or test)");
    return split == "train" ? train : split == "valid" ? valid : test;
  }
  /// The same, read only.
  const std::vector<trajectory>& split(std::string_view split) const {
    return const_cast<trajectory_dataset&>(*this).split(split);
  }
};

/// The in-edges of a mesh: every two corners of a cell joined both ways, each pair once, rows
/// sorted. `cells`: C x corners node ids, row-major. Throws sar::invalid_argument naming
/// `where`, the cell and the id for an id outside [0, nodes) or a cell naming a node twice.
inline csr mesh_graph(std::span<const std::int32_t> cells, int corners, node_t nodes,
                      const std::string& where) {
  SAR_CHECK(corners >= 2 && cells.size() % static_cast<std::size_t>(corners) == 0,
            invalid_argument, where, ": ", cells.size(), " cell entries for cells of ", corners,
            " corners");
  std::vector<std::pair<node_t, node_t>> pairs;  // (destination, source)
  pairs.reserve(cells.size() * static_cast<std::size_t>(corners - 1));
  const std::size_t count = cells.size() / static_cast<std::size_t>(corners);
  for (std::size_t c = 0; c < count; ++c) {
    const std::int32_t* cell = cells.data() + c * static_cast<std::size_t>(corners);
    for (int a = 0; a < corners; ++a) {
      SAR_CHECK(cell[a] >= 0 && cell[a] < nodes, invalid_argument, where, ": cell ", c,
                " names node ", cell[a], " of ", nodes);
      for (int b = 0; b < a; ++b) {
        SAR_CHECK(cell[a] != cell[b], invalid_argument, where, ": cell ", c, " names node ",
                  cell[a], " twice");
        pairs.emplace_back(cell[a], cell[b]);
        pairs.emplace_back(cell[b], cell[a]);
      }
    }
  }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  csr g;
  g.num_rows = g.num_cols = nodes;
  g.offsets.assign(static_cast<std::size_t>(nodes) + 1, 0);
  g.columns.reserve(pairs.size());
  for (const auto& [destination, source] : pairs) {
    ++g.offsets[static_cast<std::size_t>(destination) + 1];
    g.columns.push_back(source);
  }
  for (std::size_t i = 0; i < static_cast<std::size_t>(nodes); ++i)
    g.offsets[i + 1] += g.offsets[i];
  return g;
}

/// One row per entry of `g` (the edge j -> i): pos_j - pos_i and its Euclidean norm
/// (MeshGraphNets' relative mesh position; pos.cols() + 1 columns).
inline matrixf mesh_edge_features(const csr& g, const matrixf& pos) {
  const Eigen::Index d = pos.cols();
  matrixf f(static_cast<Eigen::Index>(g.num_edges()), d + 1);
  for (node_t i = 0; i < g.num_rows; ++i)
    for (edge_t e = g.offsets[i]; e < g.offsets[i + 1]; ++e) {
      const auto r = static_cast<Eigen::Index>(e);
      f.row(r).head(d) = pos.row(g.columns[e]) - pos.row(i);
      f(r, d) = f.row(r).head(d).norm();
    }
  return f;
}

inline void trajectory::connect(int corners) {
  graph = mesh_graph(cells, corners, num_nodes(), name);
  edge_features = mesh_edge_features(graph, mesh_pos);
}

}  // namespace sar
