// The library sar-models: make_model, load_model and train_full_batch (with Adam) in float and
// double on sar::local_schedule, compiled once for every program linked with it
// (sar/train/compiled_models.hpp). Needs no MPI.
#include "sar/schedule/local_schedule.hpp"
#include "sar/train/full_batch.hpp"
#include "sar/train/model_file.hpp"

namespace sar {
SAR_LOCAL_MODELS(SAR_COMPILED_MODEL_INSTANCES, )
}  // namespace sar
