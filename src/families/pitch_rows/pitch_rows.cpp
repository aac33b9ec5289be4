#include "families/pitch_rows/pitch_rows.hpp"

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
  const long long strips = p.n * p.d * p.h * ceil_div(p.c, 32);  // NDHWC: a block a row's 32 channels
  copy.grid = stride_grid(layout == Layout::NDHWC ? strips * copy.block : rows * pitch / 4,  // else a thread per 16 bytes
                          copy.block, limits, 8);
  copy.workspace_bytes = static_cast<uint64_t>(rows * pitch) * sizeof(float);
  copy.every_call = dtype != DataType::Float32 || layout != Layout::NCDHW;
  return copy;
}

}  // namespace conv3djit::detail
