// The library sar-models-distributed: make_model, load_model and train_full_batch (with Adam)
// in float and double on sar::distributed_schedule<sar::mpi_communicator>, compiled once for
// every program linked with it (sar/train/compiled_models.hpp).
#include "sar/comm/mpi.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/train/full_batch.hpp"
#include "sar/train/model_file.hpp"

namespace sar {
SAR_DISTRIBUTED_MODELS(SAR_COMPILED_MODEL_INSTANCES, )
}  // namespace sar
