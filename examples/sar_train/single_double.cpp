// sar-train: train_single<double> in a translation unit of its own (see sar_train.hpp).
#include "training.hpp"

namespace sar_train {
template nlohmann::json train_single<double>(
    const program_options&, const sar::model_config&, sar::graph_dataset&,
    sar::self_loop_policy, sar::mpi_communicator&);
}  // namespace sar_train
