// The models compiled once, in a library, instead of in every file that builds one.
//
// A model of make_model holds every layer kind behind any_layer, so each file that calls
// make_model<T, Schedule> compiles every layer's forward and backward under that schedule: a
// minute or more per file at -O3, and most of its object code. Two libraries hold make_model,
// load_model and train_full_batch (with Adam) in float and double, compiled once:
//
//   sar-models               on sar::local_schedule (no MPI)
//   sar-models-distributed   on sar::distributed_schedule<sar::mpi_communicator>, + sar-models
//
// Their dependency (pkg-config sar-models / sar-models-distributed, CMake sar::models /
// sar::models_distributed, Meson dependency('sar-models') / ('sar-models-distributed'))
// defines SAR_USE_COMPILED_MODELS or SAR_USE_COMPILED_DISTRIBUTED_MODELS; models.hpp,
// model_file.hpp and full_batch.hpp then declare the libraries' instances extern, and no file
// of the program compiles them. tools/models/ defines them (a program may compile those two
// files itself instead of linking the libraries).
#pragma once

/// Calls X(prefix, T, Schedule) for each instance of the library sar-models.
#define SAR_LOCAL_MODELS(X, prefix) X(prefix, float, local_schedule) X(prefix, double, local_schedule)
/// Calls X(prefix, T, Schedule) for each instance of the library sar-models-distributed.
#define SAR_DISTRIBUTED_MODELS(X, prefix)                 \
  X(prefix, float, distributed_schedule<mpi_communicator>) \
  X(prefix, double, distributed_schedule<mpi_communicator>)

/// The instances of one model (prefix: empty to define them, extern to declare them):
/// make_model, load_model and train_full_batch with Adam. Where used, models.hpp,
/// model_file.hpp and full_batch.hpp are included (tools/models/ defines the libraries so).
#define SAR_COMPILED_MODEL_INSTANCES(prefix, T, Schedule) \
  SAR_MAKE_MODEL_INSTANCE(prefix, T, Schedule)            \
  SAR_LOAD_MODEL_INSTANCE(prefix, T, Schedule)            \
  SAR_TRAIN_FULL_BATCH_INSTANCE(prefix, T, Schedule)

#if defined(SAR_USE_COMPILED_DISTRIBUTED_MODELS)
#include "sar/comm/mpi.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/schedule/local_schedule.hpp"
/// Calls X(extern, T, Schedule) for each instance of the libraries the program links.
#define SAR_EXTERN_COMPILED_MODELS(X) SAR_LOCAL_MODELS(X, extern) SAR_DISTRIBUTED_MODELS(X, extern)
#elif defined(SAR_USE_COMPILED_MODELS)
#include "sar/schedule/local_schedule.hpp"
/// Calls X(extern, T, Schedule) for each instance of the library the program links.
#define SAR_EXTERN_COMPILED_MODELS(X) SAR_LOCAL_MODELS(X, extern)
#else
/// No library linked: the program compiles the instances it uses.
#define SAR_EXTERN_COMPILED_MODELS(X)
#endif
