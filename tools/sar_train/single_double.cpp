// sar-train: the runs of models on local_schedule in double (see sar_train.hpp): one process
// (node tasks and link prediction), and minibatch training on P ranks; sar-predict's and
// sar-plan's (shared_runs.hpp).
#include "link_training.hpp"
#include "training.hpp"

namespace sar_train {
template nlohmann::json train_links_single<double>(
    const program_options&, const sar::model_config&, sar::graph_dataset&, sar::link_split,
    sar::mpi_communicator&);
template nlohmann::json train_single<double>(
    const program_options&, const sar::model_config&, sar::graph_dataset&,
    sar::mpi_communicator&);
template nlohmann::json train_sampled_distributed<double>(
    const program_options&, const sar::model_config&, sar::graph_part&, const std::string&,
    sar::mpi_communicator&, std::vector<sar::node_t>);
template sar::matrixf predict_saved<double, sar::local_schedule>(
    const sar::saved_model&, sar::local_schedule&, const sar::matrixf&);
template std::vector<double> epoch_seconds<double>(const sar::model_config&, sar::graph_dataset&,
                                                int);
}  // namespace sar_train
