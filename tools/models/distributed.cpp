// The models on P ranks (make_model, load_model and train_full_batch in float and double on
// sar::distributed_schedule<sar::mpi_communicator>), compiled once for every program and test
// that includes sar/train/compiled_models.hpp.
#define SAR_DEFINE_COMPILED_MODELS
#include "sar/train/compiled_models.hpp"

namespace sar {
SAR_COMPILED_MODELS(, float, distributed_schedule<mpi_communicator>)
SAR_COMPILED_MODELS(, double, distributed_schedule<mpi_communicator>)
}  // namespace sar
