#pragma once
// pitch_rows: an input copied into rows of 16-byte multiples, for kernels whose TMA boxes need
// such rows (a tensor map's strides are 16-byte multiples). Shape-generic: one kernel for every
// plan of an element type.
#include "plan/plan.hpp"

namespace conv3djit::detail {

/// The copy of an input of p's extents and element type into rows of input_row_pitch(W) elements.
PrepPlan pitch_rows_plan(const ConvParams& p, DataType dtype, const DeviceLimits& limits);

}  // namespace conv3djit::detail
