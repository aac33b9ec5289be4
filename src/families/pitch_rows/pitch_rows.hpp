#pragma once
// pitch_rows: an input copied as float32 into rows of 16-byte multiples, for kernels whose TMA
// boxes need such rows (a tensor map's strides are 16-byte multiples) and stage floats.
// Shape-generic: one kernel for every plan of an element type and layout.
#include "plan/plan.hpp"

namespace conv3djit::detail {

/// Whether kernels that stage floats from NCDHW rows read an input of this type and layout only
/// through the copy, on every call: half types (the kernel reads floats) and NDHWC (it reads NCDHW).
inline bool pitch_rows_every_call(DataType dtype, Layout layout) {
  return dtype != DataType::Float32 || layout != Layout::NCDHW;
}

/// The copy of an input of p's extents, element type and layout into float32 NCDHW rows of
/// input_row_pitch(W) elements: made on every call for half types and NDHWC inputs (the kernel
/// reads NCDHW floats), else where Plan::copies_input says so.
PrepPlan pitch_rows_plan(const ConvParams& p, DataType dtype, Layout layout, const DeviceLimits& limits);

}  // namespace conv3djit::detail
