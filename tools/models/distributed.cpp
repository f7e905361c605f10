// The library sar-models-distributed: make_model, load_model and train_full_batch (with Adam)
// in float and double on sar::distributed_schedule<sar::mpi_communicator>, compiled once for
// every program linked with it (sar/train/compiled_models.hpp).
#include "sar/comm/mpi.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/train/full_batch.hpp"
#include "sar/train/model_file.hpp"

#define SAR_DEFINE_MODEL(prefix, T, Schedule)   \
  SAR_MAKE_MODEL_INSTANCE(prefix, T, Schedule) \
  SAR_LOAD_MODEL_INSTANCE(prefix, T, Schedule) \
  SAR_TRAIN_FULL_BATCH_INSTANCE(prefix, T, Schedule)

namespace sar {
SAR_DISTRIBUTED_MODELS(SAR_DEFINE_MODEL, )
}  // namespace sar
