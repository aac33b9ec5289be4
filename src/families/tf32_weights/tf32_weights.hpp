#pragma once
// tf32_weights: a float32 weight rounded to TF32 in its own layout, for kernels whose tensor cores
// read the weight from shared memory as it arrives (igemm_sm90_half in the tf32 class) and would
// truncate it. Shape-generic: one kernel for every plan.
#include "plan/plan.hpp"

namespace conv3djit::detail {

/// The rounding of p's K x C/groups x KD x KH x KW weight; runs on every call, as the weight may change.
PrepPlan tf32_weights_plan(const ConvParams& p, const DeviceLimits& limits);

}  // namespace conv3djit::detail
