// make_model, load_model and train_full_batch compiled once per program, not once per file
// that calls them.
//
// A model of make_model holds every layer kind behind any_layer, so each translation unit
// that calls make_model<T, Schedule> compiles every layer's forward and backward under that
// schedule: minutes per file, and most of a file's object code. Including this header
// declares the common instances extern (float and double, on sar::local_schedule and on
// sar::distributed_schedule<sar::mpi_communicator>), so the files that include it compile
// none of it; exactly one file of the program defines them:
//
//   #define SAR_DEFINE_COMPILED_MODELS
//   #include "sar/train/compiled_models.hpp"
//   namespace sar {
//   SAR_COMPILED_MODELS(, float, local_schedule)   // and the others the program uses
//   }
//
// (tools/models/local.cpp and tools/models/distributed.cpp do this for sar's own programs and
// tests). Needs MPI (sar::mpi in CMake, sar.pc).
#pragma once

#include <cstdint>
#include <functional>

#include "sar/comm/mpi.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/optim/adam.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/train/full_batch.hpp"
#include "sar/train/model_file.hpp"
#include "sar/train/models.hpp"

/// The explicit instantiations of make_model<T, Schedule>, load_model<T, Schedule> and
/// train_full_batch of their models with Adam: declarations with `extern` as `prefix`,
/// definitions with an empty one. Inside namespace sar.
#define SAR_COMPILED_MODELS(prefix, T, Schedule)                                              \
  prefix template dynamic_sequential<T, Schedule> make_model<T, Schedule>(                   \
      const model_config&, Eigen::Index, Eigen::Index, std::uint64_t);                        \
  prefix template dynamic_sequential<T, Schedule> load_model<T, Schedule>(const saved_model&); \
  prefix template train_result                                                                \
  train_full_batch<dynamic_sequential<T, Schedule>, Schedule, adam<T>, T>(                    \
      dynamic_sequential<T, Schedule>&, Schedule&, adam<T>&, const node_data<T>&,             \
      const train_options&, const std::function<void(const epoch_stats&)>&);

#ifndef SAR_DEFINE_COMPILED_MODELS
namespace sar {
SAR_COMPILED_MODELS(extern, float, local_schedule)
SAR_COMPILED_MODELS(extern, double, local_schedule)
SAR_COMPILED_MODELS(extern, float, distributed_schedule<mpi_communicator>)
SAR_COMPILED_MODELS(extern, double, distributed_schedule<mpi_communicator>)
}  // namespace sar
#endif
