// reference_fp64: the GPU oracle, a float64 direct convolution of every description; shape-generic
// (every extent a run-time argument), so one kernel per element type checks every layer.
#include "plan/family.hpp"

namespace conv3djit::detail {

Plan make_reference_plan(const Problem& prob, const DeviceLimits& limits) {
  static const KernelDef def{"reference_fp64", "reference_fp64/reference_fp64.cu", 0, false, {}};
  Plan plan;
  plan.params = make_params(prob);
  plan.key.kernel = &def;
  plan.key.dtype = prob.desc.dtype;
  plan.key.layout = prob.desc.layout;
  plan.block = 256;
  plan.grid = stride_grid(prob.output_elements, plan.block, limits, 16);
  return plan;
}

}  // namespace conv3djit::detail
