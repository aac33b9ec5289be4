#include "families/pitch_rows/pitch_rows.hpp"

#include "plan/family.hpp"

namespace conv3djit::detail {

PrepPlan pitch_rows_plan(const ConvParams& p, DataType dtype, const DeviceLimits& limits) {
  static const KernelDef def{"pitch_rows", "pitch_rows/pitch_rows.cu", 0, false, {}};
  PrepPlan copy;
  copy.key.kernel = &def;
  copy.key.dtype = dtype;
  copy.block = 256;
  const long long rows = p.n * p.c * p.d * p.h, pitch = input_row_pitch(p.w);
  copy.grid = stride_grid(rows * pitch / 4, copy.block, limits, 8);  // a thread per 16 bytes written
  copy.workspace_bytes = static_cast<uint64_t>(rows * pitch) * sizeof(float);
  copy.every_call = dtype != DataType::Float32;
  return copy;
}

}  // namespace conv3djit::detail
