// The models on one process (make_model, load_model and train_full_batch in float and double on
// sar::local_schedule), compiled once for every program and test that includes
// sar/train/compiled_models.hpp.
#define SAR_DEFINE_COMPILED_MODELS
#include "sar/train/compiled_models.hpp"

namespace sar {
SAR_COMPILED_MODELS(, float, local_schedule)
SAR_COMPILED_MODELS(, double, local_schedule)
}  // namespace sar
