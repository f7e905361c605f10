// One idea: a learnt simulator trained on many meshes (MeshGraphNets; sar/train/mesh_surrogate.hpp).
// Wave trajectories around random obstacles, each on its own mesh, stand in for a solver's
// output; a surrogate learns the next state from the current one (normalisers, training noise,
// several meshes per step), then replaces the solver on unseen meshes: one step from the true
// state, and a rollout from the first state on its own outputs, each next to persistence.
// Under mpirun -np P the ranks share every step's meshes (the same model on any P).
//
//   build/examples/learnt-simulator
//   mpirun -np 2 build/examples/learnt-simulator
#include <cstdio>

#include "sar/comm/mpi.hpp"
#include "sar/graph/wave_trajectories.hpp"
#include "sar/train/mesh_surrogate.hpp"

namespace {

/// Trains on the training meshes, then reports the test meshes. Collective.
int run(sar::mpi_communicator& comm) {
  sar::wave_dataset_options data;  // 20 training and 4 test meshes of about 300 nodes
  data.trajectory.steps = 20;
  const sar::trajectory_dataset waves = sar::make_wave_dataset(data);

  sar::model_config config = sar::surrogate_model_config();  // MeshGraphNets' shape, smaller
  config.hidden = 32;
  config.layers = 4;
  config.learning_rate = 3e-3;
  auto simulator = sar::make_surrogate<float>(waves.fields, config, /*seed=*/1);
  auto optimiser = sar::make_optimiser(simulator.config, simulator.model);
  sar::train_surrogate(simulator, waves.train, optimiser,
                       {.steps = 300, .normaliser_steps = 20, .batch_meshes = 4, .noise = 0.003,
                        .log_every = comm.rank() == 0 ? 100 : 0},
                       comm);

  const sar::surrogate_evaluation e = sar::evaluate_surrogate(simulator, waves.test, 8, comm);
  if (comm.rank() == 0)
    std::printf("one step: RMSE %.4f (persistence %.4f); rollout of %d steps: %.4f (%.4f)\n",
                e.one_step_rmse, e.persistence_one_step_rmse, e.horizons.back(),
                e.rollout_rmse.back(), e.persistence_rollout_rmse.back());
  return e.one_step_rmse < e.persistence_one_step_rmse ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  sar::mpi_environment mpi(argc, argv);  // also without mpirun: one rank
  return sar::run_mpi_program("learnt-simulator", run);
}
