// sar-train: train_distributed<double> and train_links_distributed<double> in a translation unit
// of their own (see sar_train.hpp), and sar-predict's prediction on P ranks (shared_runs.hpp).
#include "link_training.hpp"
#include "training.hpp"

namespace sar_train {
template nlohmann::json train_links_distributed<double>(
    const program_options&, const sar::model_config&, sar::graph_part&, const std::string&,
    sar::link_split, sar::mpi_communicator&);
template nlohmann::json train_distributed<double>(
    const program_options&, const sar::model_config&, sar::graph_part&, const std::string&,
    sar::mpi_communicator&);
template sar::matrixf predict_saved<double, sar::distributed_schedule<sar::mpi_communicator>>(
    const sar::saved_model&, sar::distributed_schedule<sar::mpi_communicator>&,
    const sar::matrixf&);
}  // namespace sar_train
