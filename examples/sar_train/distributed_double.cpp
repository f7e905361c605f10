// sar-train: train_distributed<double> in a translation unit of its own (see sar_train.hpp).
#include "training.hpp"

namespace sar_train {
template nlohmann::json train_distributed<double>(
    const program_options&, const sar::model_config&, sar::graph_part&, const std::string&,
    sar::mpi_communicator&);
}  // namespace sar_train
