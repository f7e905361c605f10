// sar-surrogate: learnt simulators on meshes (MeshGraphNets; sar/train/mesh_surrogate.hpp).
// Two commands (sar-predict rolls a trained surrogate out):
//
//   sar-surrogate generate --out waves --train 40 --valid 4 --test 8
//       a trajectory dataset in DeepMind's layout (sar/graph/io/trajectories.hpp): waves
//       around a random obstacle, each trajectory on its own mesh (sar/graph/wave_trajectories.hpp)
//   mpirun -np 2 sar-surrogate train --dataset waves --steps 2000 --save-model waves.sarmodel
//       trains on train/ (data parallel over the ranks), reports the one-step and rollout RMSE
//       of valid/ and test/ next to persistence (--metrics-out FILE: as JSON)
//   sar-predict --model waves.sarmodel --dataset waves --trajectory test/traj_0000 --out r
//       rolls the saved model out on one trajectory (tools/sar_predict.cpp)
//
// Every output is written as sar writes directories and files (an earlier output of the same
// command is replaced only once the new one is complete; anything else is refused).
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tbb/task_arena.h>

#include "mpi_program_support.hpp"
#include "sar/comm/mpi.hpp"
#include "sar/core/memory.hpp"
#include "sar/graph/io/trajectories.hpp"
#include "sar/graph/wave_trajectories.hpp"
#include "sar/io/output_file.hpp"
#include "sar/io/safe_directory.hpp"
#include "sar/train/mesh_surrogate.hpp"
#include "sar/version.hpp"

namespace {

/// `generate`'s settings.
struct generate_settings {
  std::string out;                   ///< the dataset directory
  sar::wave_dataset_options data{};  ///< its trajectories
};

/// `train`'s settings.
struct train_settings {
  std::string dataset;                 ///< the trajectory dataset
  std::string save_model;              ///< where the trained surrogate goes (optional)
  std::string metrics_out;             ///< where the figures go as JSON (optional)
  sar::surrogate_options run{};        ///< steps, batches, noise, seed
  sar::model_config model = sar::surrogate_model_config();  ///< hidden, layers, lr
  int threads = 0;                     ///< worker threads per rank (0: all cores)
};

/// Which command the command line asked for, with its settings.
struct settings {
  std::optional<generate_settings> generate;
  std::optional<train_settings> train;
};

std::optional<int> parse_settings(int argc, char** argv, settings& s) {
  CLI::App app{"Learnt simulators on meshes (MeshGraphNets): make a trajectory dataset, train a "
               "surrogate on one (one process, or data parallel under mpirun); sar-predict "
               "--trajectory rolls a saved one out",
               "sar-surrogate"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sar-surrogate (sar " SAR_VERSION_STRING ")");

  generate_settings g;
  auto* gen = app.add_subcommand("generate", "write a dataset of wave trajectories around a "
                                             "random obstacle, each on its own jittered mesh");
  gen->add_option("--out", g.out, "dataset directory (created; an earlier dataset sar wrote "
                                  "there is replaced, any other non-empty directory refused)")
      ->required()
      ->check(sar_programs::not_empty);
  gen->add_option("--train", g.data.train, "training trajectories")
      ->check(sar_programs::positive)->capture_default_str();
  gen->add_option("--valid", g.data.valid, "validation trajectories")
      ->check(sar_programs::non_negative)->capture_default_str();
  gen->add_option("--test", g.data.test, "test trajectories")
      ->check(sar_programs::non_negative)->capture_default_str();
  gen->add_option("--steps", g.data.trajectory.steps, "steps per trajectory")
      ->check(CLI::Range(2, 1 << 20))->capture_default_str();
  gen->add_option("--cells-across", g.data.trajectory.cells_across,
                  "mesh squares across the channel (about 2 x its square nodes per mesh)")
      ->check(CLI::Range(4, 4096))->capture_default_str();
  gen->add_option("--dt", g.data.trajectory.dt, "time between steps")
      ->check(sar_programs::positive)->capture_default_str();
  gen->add_option("--substeps", g.data.trajectory.substeps, "solver steps per stored step")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  gen->add_option("--seed", g.data.seed, "keys every mesh and start")->capture_default_str();

  train_settings t;
  auto* train = app.add_subcommand("train", "train a surrogate on a trajectory dataset and "
                                            "report one-step and rollout RMSEs");
  train->add_option("--dataset", t.dataset, "trajectory dataset directory (DeepMind's layout "
                                            "with .npy fields)")
      ->required()
      ->check(sar_programs::not_empty);
  train->add_option("--steps", t.run.steps, "optimiser steps")
      ->check(sar_programs::non_negative)->capture_default_str();
  train->add_option("--normaliser-steps", t.run.normaliser_steps,
                    "steps before them that only fill the normalisers")
      ->check(sar_programs::non_negative)->capture_default_str();
  train->add_option("--batch-meshes", t.run.batch_meshes,
                    "(trajectory, time) samples per step, over all ranks")
      ->check(sar_programs::positive)->capture_default_str();
  train->add_option("--noise", t.run.noise, "deviation of the training noise on normal nodes' "
                                            "input fields (the target corrected)")
      ->check(sar_programs::non_negative)->capture_default_str();
  train->add_option("--lr-decay", t.run.final_learning_rate,
                    "the learning rate decays exponentially to this fraction of --lr by the "
                    "last step (1: constant)")
      ->check(CLI::Range(1e-6, 1.0))->capture_default_str();
  train->add_option("--hidden", t.model.hidden, "latent width")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  train->add_option("--layers", t.model.layers, "message-passing steps")
      ->check(CLI::Range(1, 1 << 10))->capture_default_str();
  train->add_option("--lr", t.model.learning_rate, "Adam's learning rate")
      ->check(sar_programs::positive)->capture_default_str();
  train->add_option("--seed", t.run.seed, "seed of the parameters, samples and noise")
      ->capture_default_str();
  train->add_option("--log-every", t.run.log_every, "a progress line every this many steps "
                                                    "(0: none)")
      ->check(sar_programs::non_negative)->capture_default_str();
  train->add_option("--save-model", t.save_model, "write the trained surrogate to this file "
                                                  "(for sar-predict --trajectory)")
      ->check(sar_programs::not_empty);
  train->add_option("--metrics-out", t.metrics_out, "write a JSON summary to this file")
      ->check(sar_programs::not_empty);
  train->add_option("--threads", t.threads, "worker threads per rank (0 = all cores)")
      ->check(sar_programs::thread_count);

  if (const auto status = sar_programs::parse_command_line(app, argc, argv)) return status;
  if (gen->parsed()) s.generate = g;
  if (train->parsed()) s.train = t;
  return std::nullopt;
}

int generate(const generate_settings& g, sar::mpi_communicator& comm) {
  SAR_CHECK(comm.size() == 1, sar::invalid_argument, "sar-surrogate generate: runs on one "
            "process (", comm.size(), " ranks)");
  sar::check_replaceable(g.out, sar::trajectory_dataset_kind, "sar-surrogate generate: --out");
  const double grid = 2.0 * (g.data.trajectory.cells_across + 1.0) *
                      (g.data.trajectory.cells_across + 1.0);
  const double trajectories = static_cast<double>(g.data.train) + g.data.valid + g.data.test;
  sar::check_memory<sar::invalid_argument>(
      "sar-surrogate generate",
      sar::message(trajectories, " trajectories of --steps ", g.data.trajectory.steps,
                   " on meshes of --cells-across ", g.data.trajectory.cells_across),
      trajectories * grid * (8.0 * g.data.trajectory.steps + 64.0));
  const sar::trajectory_dataset d = sar::make_wave_dataset(g.data);
  sar::write_trajectory_dataset(g.out, d);
  std::size_t nodes = 0;
  for (const auto& t : d.train) nodes += static_cast<std::size_t>(t.num_nodes());
  std::printf("wrote %s: %zu training, %zu validation and %zu test trajectories of %d steps "
              "(%.0f nodes per mesh on average)\n",
              g.out.c_str(), d.train.size(), d.valid.size(), d.test.size(), d.fields.length,
              static_cast<double>(nodes) / static_cast<double>(d.train.size()));
  return 0;
}

/// One line of an evaluation for the log.
std::string summary(const char* split, const sar::surrogate_evaluation& e) {
  std::string line = sar::message(split, ": one-step RMSE ", e.one_step_rmse, " (persistence ",
                                  e.persistence_one_step_rmse, ")");
  for (std::size_t k = 0; k < e.horizons.size(); ++k)
    line += sar::message("; rollout RMSE over ", e.horizons[k], " steps ", e.rollout_rmse[k],
                         " (persistence ", e.persistence_rollout_rmse[k], ")");
  return line;
}

int train(const train_settings& t, sar::mpi_communicator& comm) {
  if (comm.rank() != 0) sar::set_log_level(sar::log_level::warning);
  std::optional<sar::output_file> metrics_out;  // checked now, written at the end
  std::exception_ptr failure;
  if (comm.rank() == 0)
    sar::detail::guarded(failure, [&] {
      if (!t.metrics_out.empty())
        metrics_out.emplace(t.metrics_out, "sar-surrogate train: --metrics-out");
      if (!t.save_model.empty()) sar::output_file(t.save_model, "sar-surrogate train: --save-model");
    });
  sar::detail::agree_on_failure(comm, failure, "sar-surrogate");
  const sar::trajectory_dataset d = sar::read_trajectory_dataset(t.dataset);
  sar::log_info(sar::message("dataset ", d.name, ": ", d.train.size(), " training, ",
                             d.valid.size(), " validation, ", d.test.size(),
                             " test trajectories of ", d.fields.length, " steps; fields ",
                             d.fields.state_width(), " wide; ", comm.size(), " rank(s)"));
  sar::node_t largest = 0;
  for (const sar::trajectory& traj : d.train) largest = std::max(largest, traj.num_nodes());
  sar::model_config sized = t.model;
  sized.edge_dim = d.fields.dimensions + 1;
  const auto need = sar::estimate_model_memory(
      sized, static_cast<double>(sar::surrogate_input_width(d.fields)), d.fields.state_width(),
      static_cast<double>(largest) * static_cast<double>(t.run.batch_meshes), sizeof(float));
  sar::check_memory<sar::invalid_argument>(
      "sar-surrogate train",
      sar::message("the surrogate of --layers ", sized.layers, " and --hidden ", sized.hidden,
                   " on --batch-meshes ", t.run.batch_meshes, " meshes of up to ", largest,
                   " nodes (parameters, gradients and Adam moments ",
                   sar::format_bytes(need.parameters), ", activations at least ",
                   sar::format_bytes(need.activations), ")"),
      need.total());
  sar::mesh_surrogate<float> s = sar::make_surrogate<float>(d.fields, t.model, t.run.seed);
  auto optimiser = sar::make_optimiser(s.config, s.model);
  const sar::surrogate_train_result result =
      sar::train_surrogate(s, d.train, optimiser, t.run, comm);
  nlohmann::json metrics = {{"dataset", d.name},
                            {"ranks", comm.size()},
                            {"train_trajectories", d.train.size()},
                            {"steps", t.run.steps},
                            {"batch_meshes", t.run.batch_meshes},
                            {"hidden", s.config.hidden},
                            {"layers", s.config.layers},
                            {"losses", result.losses},
                            {"step_seconds_median", result.median_step_seconds()}};
  for (const char* split : {"valid", "test"}) {
    const auto& list = d.split(split);
    if (list.empty()) continue;
    const sar::surrogate_evaluation e =
        sar::evaluate_surrogate(s, list, t.run.batch_meshes, comm);
    sar::log_info(summary(split, e));
    metrics.update(e.to_json(std::string(split) + "_"));
  }
  if (!t.save_model.empty())
    sar::save_surrogate(comm, t.save_model, s, {{"dataset", d.name}, {"steps", t.run.steps}});
  std::int64_t peak = sar::peak_memory_bytes();
  comm.all_reduce(std::span<std::int64_t>(&peak, 1), sar::reduce_op::max);
  metrics["peak_memory_bytes"] = peak;
  if (comm.rank() == 0) {
    sar::log_info(sar::message("median step ", result.median_step_seconds(),
                               " s; peak memory per rank ",
                               static_cast<double>(peak) / 1048576.0, " MiB"));
    if (metrics_out) metrics_out->write(metrics.dump(2) + "\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  if (const auto status = parse_settings(argc, argv, s)) return *status;
  const int threads = s.train ? s.train->threads : 0;
  return sar_programs::run_under_mpi("sar-surrogate", argc, argv,
                                     [&](sar::mpi_communicator& comm) {
                                       tbb::task_arena arena(threads > 0
                                                                 ? threads
                                                                 : tbb::task_arena::automatic);
                                       return arena.execute([&] {
                                         return s.generate ? generate(*s.generate, comm)
                                                           : train(*s.train, comm);
                                       });
                                     });
}
