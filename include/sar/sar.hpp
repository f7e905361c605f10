// Everything sar offers for training on one process: core vocabulary, graphs and generators,
// layers, models, losses, optimisers, the trainer and the gradient checker. Needs only Eigen,
// oneTBB and Random123. The parts with heavy dependencies are opt-in leaf headers:
//   sar/graph/io/load.hpp (and io/*)   loaders; zlib, nlohmann-json (io/npy.hpp)
//   sar/partition/metis.hpp            METIS
//   sar/partition/store.hpp            partition store; nlohmann-json
//   sar/comm/mpi.hpp                   Boost.MPI / MPI
//   sar/distributed/distributed_schedule.hpp  the distributed (SAR) schedules
//   sar/train/out_of_core.hpp          training beyond memory, spilling to disk; nlohmann-json
#pragma once

#include "sar/core/error.hpp"
#include "sar/core/log.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"
#include "sar/schedule/schedule.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/schedule/relational_graph.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/csr.hpp"
#include "sar/graph/dataset.hpp"
#include "sar/graph/generators.hpp"
#include "sar/graph/heterogeneous.hpp"
#include "sar/graph/schema.hpp"
#include "sar/nn/activations.hpp"
#include "sar/nn/any_layer.hpp"
#include "sar/nn/batch_norm.hpp"
#include "sar/nn/dropout.hpp"
#include "sar/nn/edge_conv.hpp"
#include "sar/nn/gat.hpp"
#include "sar/nn/gcn.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/linear.hpp"
#include "sar/nn/loss.hpp"
#include "sar/nn/metrics.hpp"
#include "sar/nn/task.hpp"
#include "sar/nn/parameters.hpp"
#include "sar/nn/relation_wise.hpp"
#include "sar/nn/rgcn.hpp"
#include "sar/nn/sage.hpp"
#include "sar/nn/sequential.hpp"
#include "sar/nn/type_projection.hpp"
#include "sar/optim/adam.hpp"
#include "sar/optim/sgd.hpp"
#include "sar/testing/gradient_checker.hpp"
#include "sar/train/full_batch.hpp"
#include "sar/train/models.hpp"
#include "sar/version.hpp"
