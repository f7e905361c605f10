// sar-train: train_single<float> in a translation unit of its own (see sar_train.hpp).
#include "training.hpp"

namespace sar_train {
template nlohmann::json train_single<float>(
    const program_options&, const sar::model_config&, sar::graph_dataset&,
    sar::self_loop_policy, sar::mpi_communicator&);
}  // namespace sar_train
