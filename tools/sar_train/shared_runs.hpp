// What sar-predict and sar-plan take from sar-train's compiled runs (training.hpp): they run
// the same models, so they link sar-train's translation units (one per precision and schedule)
// instead of compiling every layer once more.
#pragma once

#include <vector>

#include "sar/comm/mpi.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/graph/dataset.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/train/model_config.hpp"
#include "sar/train/model_file.hpp"

namespace sar_train {

/// The outputs of the model `saved` (of precision T) on `graph` for `features`, in float and
/// in the targets' original units. Schedule: sar::local_schedule, or
/// sar::distributed_schedule<sar::mpi_communicator> (then collective).
template <class T, class Schedule>
sar::matrixf predict_saved(const sar::saved_model& saved, Schedule& graph,
                           const sar::matrixf& features);

/// The wall seconds of each of `epochs` epochs of full-batch training of `config` (seed 1) on
/// `data` in precision T, one process, without evaluation. Requires data.graph in the model's
/// form (sar::prepare_model_graph); it is moved into the schedule.
template <class T>
std::vector<double> epoch_seconds(const sar::model_config& config, sar::graph_dataset& data,
                                  int epochs);

}  // namespace sar_train
