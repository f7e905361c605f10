// Meshes and trajectories (sar/graph/trajectories.hpp, sar/graph/io/trajectories.hpp,
// sar/graph/wave_trajectories.hpp) and learnt simulators on them (sar/train/mesh_surrogate.hpp).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <set>

#include "sar/comm/serial.hpp"
#include "sar/graph/io/trajectories.hpp"
#include "sar/graph/wave_trajectories.hpp"
#include "sar/train/mesh_surrogate.hpp"
#include "test_support.hpp"

using namespace sar;

namespace {
wave_dataset_options small_waves(int train = 2, int steps = 12) {
  wave_dataset_options o;
  o.trajectory.cells_across = 6;
  o.trajectory.steps = steps;
  o.train = train;
  o.valid = 1;
  o.test = 1;
  o.seed = 3;
  return o;
}

/// The message of what f throws (empty if nothing).
template <class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}
}  // namespace

TEST_CASE("mesh_graph joins every two corners of a cell both ways, once; edge features") {
  const std::vector<std::int32_t> cells{0, 1, 2, 1, 3, 2};  // two triangles sharing 1-2
  const csr g = mesh_graph(cells, 3, 4, "mesh");
  CHECK(g.num_edges() == 10);
  const std::vector<std::vector<node_t>> rows{{1, 2}, {0, 2, 3}, {0, 1, 3}, {1, 2}};
  for (node_t i = 0; i < 4; ++i) {
    const auto row = g.row(i);
    CHECK(std::vector<node_t>(row.begin(), row.end()) == rows[static_cast<std::size_t>(i)]);
  }
  matrixf pos(4, 2);
  pos << 0, 0, 1, 0, 0, 1, 1, 1;
  const matrixf f = mesh_edge_features(g, pos);
  REQUIRE(f.rows() == 10);
  REQUIRE(f.cols() == 3);
  // Entry 0 is 1 -> 0: pos_1 - pos_0 = (1, 0), norm 1; entry of 3 -> 1 (row 1's third).
  CHECK(f.row(0) == (row_vector<float>(3) << 1, 0, 1).finished());
  CHECK(f(4, 0) == 0);
  CHECK(f(4, 1) == 1);
  CHECK(f(4, 2) == 1);
  CHECK(mesh_graph(std::vector<std::int32_t>{0, 1, 2, 3}, 4, 4, "tet").num_edges() == 12);
  CHECK_THROWS_WITH_AS(mesh_graph(std::vector<std::int32_t>{0, 1, 4}, 3, 4, "mesh"),
                       doctest::Contains("mesh: cell 0 names node 4 of 4"), invalid_argument);
  CHECK_THROWS_WITH_AS(mesh_graph(std::vector<std::int32_t>{0, 1, 1}, 3, 4, "mesh"),
                       doctest::Contains("names node 1 twice"), invalid_argument);
}

TEST_CASE("wave trajectories: valid meshes, DeepMind's node types, bounded fields; files") {
  const wave_dataset_options o = small_waves();
  const trajectory_dataset d = make_wave_dataset(o);
  REQUIRE(d.train.size() == 2);
  REQUIRE(d.valid.size() == 1);
  REQUIRE(d.test.size() == 1);
  const double h = 1.0 / o.trajectory.cells_across;
  for (const trajectory* t : {&d.train[0], &d.train[1], &d.test[0]}) {
    INFO(t->name);
    CHECK(t->num_steps() == o.trajectory.steps);
    for (std::size_t c = 0; c < t->cells.size(); c += 3) {  // no sliver or folded triangle
      const auto p = [&](int k) { return t->mesh_pos.row(t->cells[c + k]); };
      const double area = std::abs((p(1)[0] - p(0)[0]) * (p(2)[1] - p(0)[1]) -
                                   (p(2)[0] - p(0)[0]) * (p(1)[1] - p(0)[1])) / 2;
      CHECK(area > 0.1 * h * h);
    }
    std::set<std::int32_t> types(t->node_type.begin(), t->node_type.end());
    CHECK(types == std::set<std::int32_t>{0, 4, 6});
    for (node_t v = 0; v < t->num_nodes(); ++v) {
      const auto type = static_cast<mesh_node>(t->node_type[static_cast<std::size_t>(v)]);
      if (type == mesh_node::inflow) CHECK(t->mesh_pos(v, 0) == 0);
      for (const matrixf& s : t->states) {
        CHECK(std::isfinite(s(v, 0)));
        if (type == mesh_node::wall_boundary) CHECK(s.row(v).isZero());
      }
    }
    CHECK(t->states.back().cwiseAbs().maxCoeff() < 20);
    CHECK(t->graph.num_edges() == t->edge_features.rows());
  }
  CHECK(!(  // each its own mesh
          d.train[0].mesh_pos.rows() == d.train[1].mesh_pos.rows() &&
          d.train[0].mesh_pos == d.train[1].mesh_pos));
  const trajectory_dataset again = make_wave_dataset(o);  // a pure function of the seed
  CHECK(again.test[0].states.back() == d.test[0].states.back());

  testing_support::temp_dir dir("waves");
  const auto path = dir.path / "waves";
  write_trajectory_dataset(path, d);
  const trajectory_dataset back = read_trajectory_dataset(path);
  CHECK(back.name == "waves");
  CHECK(back.fields.dynamic == std::vector<std::string>{"displacement", "velocity"});
  CHECK(back.fields.length == o.trajectory.steps);
  CHECK(back.fields.dt == o.trajectory.dt);
  REQUIRE(back.train.size() == 2);
  for (std::size_t k = 0; k < 2; ++k) {
    const trajectory &a = d.train[k], &b = back.train[k];
    CHECK(a.name == b.name);
    CHECK(a.mesh_pos == b.mesh_pos);
    CHECK(a.cells == b.cells);
    CHECK(a.node_type == b.node_type);
    CHECK(a.graph == b.graph);
    CHECK(a.edge_features == b.edge_features);
    for (int s = 0; s < a.num_steps(); ++s) CHECK(a.states[s] == b.states[s]);
  }
  // A second write replaces the dataset sar wrote; a foreign directory is refused.
  write_trajectory_dataset(path, again);
  std::filesystem::create_directories(dir.path / "mine");
  std::ofstream(dir.path / "mine" / "notes.txt") << "mine";
  CHECK_THROWS_AS(write_trajectory_dataset(dir.path / "mine", d), io_error);
  CHECK(std::filesystem::exists(dir.path / "mine" / "notes.txt"));
}

TEST_CASE("trajectory files: wrong shapes, NaN, unknown node types, bad cells name the "
          "trajectory and the field") {
  const trajectory_dataset d = make_wave_dataset(small_waves());
  testing_support::temp_dir dir("bad-waves");
  const auto fresh = [&](const char* name) {
    const auto path = dir.path / name;
    write_trajectory_dataset(path, d);
    return path;
  };
  const trajectory& t = d.train[1];
  const auto n = static_cast<std::int64_t>(t.num_nodes());
  const std::int64_t steps = t.num_steps();
  {
    const auto path = fresh("shape");
    std::vector<float> v(static_cast<std::size_t>(steps * (n + 1)), 0.0f);
    write_npy(path / "train/traj_0001/velocity.npy", npy_dtype::float32,
              std::vector<std::int64_t>{steps, n + 1, 1}, v.data());
    const std::string what = thrown([&] { read_trajectory_dataset(path); });
    CHECK(what.find("field 'velocity' of train/traj_0001 has shape (" + std::to_string(steps) +
                    ", " + std::to_string(n + 1) + ", 1)") != std::string::npos);
  }
  {
    const auto path = fresh("nan");
    std::vector<float> v(static_cast<std::size_t>(steps * n), 0.5f);
    v[static_cast<std::size_t>(2 * n + 5)] = std::numeric_limits<float>::quiet_NaN();
    write_npy(path / "train/traj_0001/displacement.npy", npy_dtype::float32,
              std::vector<std::int64_t>{steps, n, 1}, v.data());
    const std::string what = thrown([&] { read_trajectory_dataset(path); });
    CHECK(what.find("field 'displacement' of train/traj_0001 is nan at step 2, node 5") !=
          std::string::npos);
  }
  {
    const auto path = fresh("types");
    std::vector<std::int32_t> types = t.node_type;
    types[3] = 12;
    write_npy(path / "train/traj_0001/node_type.npy", npy_dtype::int32,
              std::vector<std::int64_t>{n}, types.data());
    const std::string what = thrown([&] { read_trajectory_dataset(path); });
    CHECK(what.find("field 'node_type' of train/traj_0001: node 3 has the type 12") !=
          std::string::npos);
  }
  {
    const auto path = fresh("cells");
    std::vector<std::int32_t> cells = t.cells;
    cells[4] = static_cast<std::int32_t>(n);
    write_npy(path / "train/traj_0001/cells.npy", npy_dtype::int32,
              std::vector<std::int64_t>{static_cast<std::int64_t>(cells.size() / 3), 3},
              cells.data());
    const std::string what = thrown([&] { read_trajectory_dataset(path); });
    CHECK(what.find("field 'cells' of train/traj_0001") != std::string::npos);
    CHECK(what.find("cell 1 names node " + std::to_string(n)) != std::string::npos);
  }
  {
    const auto path = fresh("meta");
    nlohmann::json meta;
    std::ifstream(path / "meta.json") >> meta;
    meta["features"].erase("node_type");
    meta.erase("field_names");
    std::ofstream(path / "meta.json") << meta.dump();
    CHECK(thrown([&] { read_trajectory_dataset(path); }).find("needs the static fields") !=
          std::string::npos);
    meta["features"]["node_type"] = {{"type", "dynamic"}, {"shape", {1, -1, 1}},
                                     {"dtype", "int32"}};
    std::ofstream(path / "meta.json") << meta.dump();
    CHECK(thrown([&] { read_trajectory_dataset(path); }).find("feature 'node_type' has shape") !=
          std::string::npos);
  }
  {
    const auto path = fresh("missing");
    std::filesystem::remove(path / "test/traj_0000/velocity.npy");
    CHECK(thrown([&] { read_trajectory_dataset(path); }).find("test/traj_0000/velocity.npy") !=
          std::string::npos);
  }
}

TEST_CASE("online_normaliser: the mean and deviation of what it saw, a constant column 1") {
  online_normaliser n(2);
  CHECK(n.mean() == std::vector<double>{0, 0});
  CHECK(n.deviation() == std::vector<double>{1, 1});
  matrixf rows(4, 2);
  rows << 1, 5, 2, 5, 3, 5, 100, 5;
  const std::vector<char> mask{1, 1, 1, 0};
  n.add(n.sums_of(rows, mask));
  CHECK(n.count() == 3);
  CHECK(n.mean()[0] == doctest::Approx(2));
  CHECK(n.deviation()[0] == doctest::Approx(std::sqrt(2.0 / 3)));
  CHECK(n.mean()[1] == doctest::Approx(5));
  CHECK(n.deviation()[1] == 1);  // constant
  matrixd x = rows.cast<double>();
  n.normalise(x);
  CHECK(x(1, 0) == doctest::Approx(0));
  CHECK(x(0, 1) == doctest::Approx(0));
  const online_normaliser back = online_normaliser::from_json(n.to_json(), 2, "test");
  CHECK(back.mean() == n.mean());
  CHECK(back.deviation() == n.deviation());
  CHECK_THROWS_AS(online_normaliser::from_json(n.to_json(), 3, "test"), io_error);
  CHECK_THROWS_AS(n.add(std::vector<double>(3, 0.0)), invalid_argument);
}

TEST_CASE("mesh batches: block diagonal, one-hot types, noise on normal nodes only, keyed") {
  const trajectory_dataset d = make_wave_dataset(small_waves());
  const trajectory &a = d.train[0], &b = d.train[1];
  const std::vector<mesh_sample> samples{{&a, &a.states[3], &a.states[4], 7},
                                         {&b, &b.states[0], &b.states[1], 8}};
  const mesh_batch clean = make_mesh_batch(samples, d.fields);
  const node_t na = a.num_nodes();
  REQUIRE(clean.offsets == std::vector<node_t>{0, na, na + b.num_nodes()});
  CHECK(clean.graph.num_edges() == a.graph.num_edges() + b.graph.num_edges());
  for (node_t v = 0; v < b.num_nodes(); ++v) {
    const auto row = clean.graph.row(na + v), own = b.graph.row(v);
    REQUIRE(row.size() == own.size());
    for (std::size_t k = 0; k < row.size(); ++k) CHECK(row[k] == own[k] + na);
    CHECK(clean.inputs.row(na + v).head(2) == b.states[0].row(v));
    CHECK(clean.inputs(na + v, 2 + b.node_type[static_cast<std::size_t>(v)]) == 1);
    CHECK(clean.inputs.row(na + v).tail(mesh_node_types).sum() == 1);
    CHECK(clean.increments.row(na + v) == b.states[1].row(v) - b.states[0].row(v));
    CHECK(clean.predicted[static_cast<std::size_t>(na + v)] ==
          (b.node_type[static_cast<std::size_t>(v)] == 0));
  }
  const mesh_batch noisy = make_mesh_batch(samples, d.fields, 0.1, 5);
  const mesh_batch alone = make_mesh_batch(std::span(samples).subspan(1), d.fields, 0.1, 5);
  double spread = 0;
  for (node_t v = 0; v < na; ++v) {
    const bool normal = a.node_type[static_cast<std::size_t>(v)] == 0;
    const row_vector<float> shift = noisy.inputs.row(v).head(2) - clean.inputs.row(v).head(2);
    CHECK((shift.isZero() != normal));
    spread += shift.squaredNorm();
    // The increment is from the noisy state (the target corrected).
    CHECK((noisy.increments.row(v) - (a.states[4].row(v) - noisy.inputs.row(v).head(2)))
              .isZero());
  }
  CHECK(spread > 0);
  // The same sample, key and seed: the same noise wherever it sits in a batch.
  CHECK(alone.inputs == noisy.inputs.bottomRows(b.num_nodes()));
}

TEST_CASE("a surrogate learns the waves: its one-step error falls below persistence's; "
          "saved and loaded it rolls out the same") {
  const trajectory_dataset d = make_wave_dataset(small_waves(4, 16));
  model_config c = surrogate_model_config();
  c.hidden = 32;
  c.layers = 3;
  c.learning_rate = 3e-3;
  mesh_surrogate<float> s = make_surrogate<float>(d.fields, c, 11);
  auto optimiser = make_optimiser(s.config, s.model);
  serial_communicator comm;
  const surrogate_options o{.steps = 200, .normaliser_steps = 10, .batch_meshes = 2,
                            .noise = 0.003, .seed = 2, .log_every = 0};
  const surrogate_train_result r = train_surrogate(s, d.train, optimiser, o, comm);
  REQUIRE(r.losses.size() == 200);
  CHECK(s.inputs.count() > 0);
  const auto mean = [](std::span<const double> v) {
    double t = 0;
    for (double x : v) t += x;
    return t / static_cast<double>(v.size());
  };
  CHECK(mean(std::span(r.losses).last(20)) < 0.2 * mean(std::span(r.losses).first(20)));
  const surrogate_evaluation e = evaluate_surrogate(s, d.test, 3, comm);
  INFO(e.to_json().dump());
  CHECK(e.one_step_rmse < e.persistence_one_step_rmse);
  CHECK(e.horizons == std::vector<int>{1, 10, 15});
  CHECK(e.rollout_rmse.front() < e.persistence_rollout_rmse.front());

  testing_support::temp_dir dir("surrogate");
  save_surrogate(comm, dir.path / "waves.sarmodel", s, {{"note", "test"}});
  mesh_surrogate<float> loaded = load_surrogate<float>(dir.path / "waves.sarmodel");
  CHECK(loaded.fields.dynamic == s.fields.dynamic);
  CHECK(loaded.inputs.mean() == s.inputs.mean());
  CHECK(loaded.increments.deviation() == s.increments.deviation());
  const trajectory* list[] = {&d.test[0]};
  const auto none = [](int, std::size_t, const matrixf&) {};
  const auto ours = rollout_surrogate(s, list, none).front();
  const auto theirs = rollout_surrogate(loaded, list, none).front();
  REQUIRE(ours.size() == d.test[0].states.size());
  for (std::size_t t = 0; t < ours.size(); ++t) CHECK(ours[t] == theirs[t]);
  // Each rollout step is the one step from the rollout's previous state (the rollout keeps
  // one batch and feeds its states back).
  for (const std::size_t t : {std::size_t{2}, ours.size() - 1}) {
    trajectory from = d.test[0];
    from.states = {ours[t - 1], d.test[0].states[t]};
    const trajectory* one[] = {&from};
    const matrixf step = rollout_surrogate(s, one, none).front().back();
    CHECK((step - ours[t]).cwiseAbs().maxCoeff() <= 1e-6);
  }
  // Per-step errors: none at step 0, evaluate_surrogate's first rollout step after it.
  const rollout_errors errors = rollout_errors_of(d.test[0], ours);
  REQUIRE(errors.model.size() == ours.size());
  CHECK(errors.model[0] == 0);
  CHECK(errors.persistence[0] == 0);
  const surrogate_evaluation alone = evaluate_surrogate(s, {d.test[0]}, 3, comm);
  CHECK(errors.model[1] == doctest::Approx(alone.rollout_rmse.front()).epsilon(1e-9));
  CHECK(errors.persistence[1] ==
        doctest::Approx(alone.persistence_rollout_rmse.front()).epsilon(1e-9));
  const std::vector<matrixf> wide{matrixf::Zero(ours[0].rows(), ours[0].cols() + 1)};
  CHECK_THROWS_AS(rollout_errors_of(d.test[0], wide), invalid_argument);
  // A model file of another kind is refused by name.
  CHECK_THROWS_WITH_AS(load_surrogate<float>(dir.path / "missing.sarmodel"),
                       doctest::Contains("missing.sarmodel"), io_error);
}
