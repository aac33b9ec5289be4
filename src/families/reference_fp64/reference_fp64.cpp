// reference_fp64: the GPU oracle, a float64 direct convolution of every description; shape-generic
// (every extent a run-time argument), so one kernel per element type checks every layer.
#include "plan/family.hpp"

namespace conv3djit::detail {

Plan make_reference_plan(const Problem& prob, const DeviceLimits& limits) {
  // The epilogue is the one thing it bakes in (one kernel per activation and residual).
  static const KernelDef def{"reference_fp64", "reference_fp64/reference_fp64.cu", kUsesEpilogue, false, {}};
  Plan plan;
  plan.params = make_params(prob);
  plan.key = shape_key(prob, def);
  plan.block = 256;
  plan.grid = stride_grid(prob.output_elements, plan.block, limits, 16);
  return plan;
}

}  // namespace conv3djit::detail
