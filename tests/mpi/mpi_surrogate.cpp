// A mesh surrogate (MeshGraphNets, sar/train/mesh_surrogate.hpp) trained data parallel on P ranks
// against one process: each rank takes a share of every step's meshes (some ranks none, in a
// step of fewer meshes than ranks), the normalisers' sums and the gradients all-reduced, the
// noise keyed by step, sample and node. In float and double: the per-step losses, the trained
// parameters, the normalisers and the one-step and rollout RMSEs of one process.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "mpi_check.hpp"
#include "sar/comm/mpi.hpp"
#include "sar/comm/serial.hpp"
#include "sar/graph/wave_trajectories.hpp"
#include "sar/train/mesh_surrogate.hpp"

using namespace sar;

namespace {

struct outcome {
  surrogate_train_result result;
  std::vector<double> values;
  std::vector<double> means;
  nlohmann::json evaluation;
};

template <class T, class Comm>
outcome train(const trajectory_dataset& d, std::int64_t batch, Comm& comm) {
  model_config c = surrogate_model_config();
  c.hidden = 16;
  c.layers = 3;
  c.learning_rate = 1e-3;
  mesh_surrogate<T> s = make_surrogate<T>(d.fields, c, 4);
  auto optimiser = make_optimiser(s.config, s.model);
  const surrogate_options o{.steps = 12, .normaliser_steps = 3, .batch_meshes = batch,
                            .noise = 0.01, .seed = 6, .log_every = 0};
  outcome out;
  out.result = train_surrogate(s, d.train, optimiser, o, comm);
  for (const T v : s.model.parameters().values()) out.values.push_back(static_cast<double>(v));
  for (const auto* n : {&s.inputs, &s.edges, &s.increments})
    out.means.insert(out.means.end(), n->mean().begin(), n->mean().end());
  out.evaluation = evaluate_surrogate(s, d.test, 2, comm).to_json();
  return out;
}

template <class T>
void check(mpi_communicator& comm, const trajectory_dataset& d, std::int64_t batch) {
  serial_communicator one;
  const outcome expected = train<T>(d, batch, one);
  const outcome got = train<T>(d, batch, comm);
  const double tolerance = std::is_same_v<T, float> ? 1e-5 : 1e-9;
  const auto close = [&](double a, double b) {
    return std::abs(a - b) <= tolerance * std::max(1.0, std::abs(b));
  };
  const char* type = std::is_same_v<T, float> ? "float" : "double";
  EXPECT(got.result.losses.size() == expected.result.losses.size(), "steps");
  for (std::size_t k = 0; k < got.result.losses.size(); ++k)
    EXPECT(close(got.result.losses[k], expected.result.losses[k]), type, " batch ", batch,
           " step ", k, ": loss ", got.result.losses[k], " on ", comm.size(), " ranks, ",
           expected.result.losses[k], " on one process");
  for (std::size_t k = 0; k < got.means.size(); ++k)
    EXPECT(close(got.means[k], expected.means[k]), type, ": normaliser mean ", k, " ",
           got.means[k], " against ", expected.means[k]);
  for (std::size_t k = 0; k < got.values.size(); ++k)
    EXPECT(close(got.values[k], expected.values[k]), type, ": parameter value ", k, " ",
           got.values[k], " against ", expected.values[k]);
  for (const auto& [key, value] : expected.evaluation.items())
    EXPECT(close(static_cast<double>(got.evaluation[key]), static_cast<double>(value)), type,
           ": ", key, " ",
           got.evaluation[key].dump(), " against ", value.dump());
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_test::run_checked(argc, argv, [](mpi_communicator& comm) {
    wave_dataset_options o;
    o.trajectory.cells_across = 5;
    o.trajectory.steps = 8;
    o.train = 5;
    o.valid = 0;
    o.test = 3;
    const trajectory_dataset d = make_wave_dataset(o);
    check<float>(comm, d, 4);
    check<double>(comm, d, 3);  // on 4 ranks one takes no mesh
    if (comm.rank() == 0) std::printf("mesh surrogate training on %d ranks: ok\n", comm.size());
  });
}
