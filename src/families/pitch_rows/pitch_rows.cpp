#include "families/pitch_rows/pitch_rows.hpp"

#include "pitch_rows/geometry.cuh"
#include "plan/family.hpp"

namespace conv3djit::detail {

PrepPlan pitch_rows_plan(const ConvParams& p, DataType dtype, Layout layout, const DeviceLimits& limits) {
  static const KernelDef def{"pitch_rows", "pitch_rows/pitch_rows.cu", 0, false, {}};
  PrepPlan copy;
  copy.key.kernel = &def;
  copy.key.dtype = dtype;
  copy.key.layout = layout;
  copy.block = 256;
  const long long rows = p.n * p.c * p.d * p.h, pitch = input_row_pitch(p.w);
  // NDHWC: a block per span of an image's positions and 32 channels; else a thread per 16 bytes.
  const long long positions = p.d * p.h * p.w;
  const long long spans = p.n * ceil_div(p.c, 32) * ceil_div(positions, 64 * pitch_rows_steps(p.n, p.c, positions));
  copy.grid = stride_grid(layout == Layout::NDHWC ? spans * copy.block : rows * pitch / 4, copy.block, limits, 8);
  copy.workspace_bytes = static_cast<uint64_t>(rows * pitch) * sizeof(float);
  copy.every_call = pitch_rows_every_call(dtype, layout);
  return copy;
}

}  // namespace conv3djit::detail
