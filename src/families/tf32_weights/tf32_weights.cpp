#include "families/tf32_weights/tf32_weights.hpp"

#include "plan/family.hpp"

namespace conv3djit::detail {

PrepPlan tf32_weights_plan(const ConvParams& p, const DeviceLimits& limits) {
  static const KernelDef def{"tf32_weights", "tf32_weights/tf32_weights.cu", 0, false, {}};
  const long long count = p.k * p.c_per_group * p.kd * p.kh * p.kw;
  PrepPlan step;
  step.key.kernel = &def;
  step.key.dtype = DataType::Float32;
  step.key.out_dtype = DataType::Float32;
  step.block = 256;
  step.grid = stride_grid(count, step.block, limits, 8);
  step.workspace_bytes = static_cast<uint64_t>(count) * sizeof(float);
  return step;
}

}  // namespace conv3djit::detail
